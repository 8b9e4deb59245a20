"""Where and how live telemetry is sent: the standard OpenTelemetry variables over ``[telemetry]``.

Read once per process object from the environment mapping it is given (never written back, no
process-global provider): ``OTEL_EXPORTER_OTLP_ENDPOINT`` (base URL; ``/v1/traces`` and
``/v1/metrics`` are appended), ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` /
``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`` (full URLs), ``OTEL_EXPORTER_OTLP_PROTOCOL``
(``http/protobuf`` or ``grpc``), ``OTEL_EXPORTER_OTLP_HEADERS``, ``OTEL_EXPORTER_OTLP_TIMEOUT``,
``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_SEMCONV_STABILITY_OPT_IN``
(``gen_ai_latest_experimental``), ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``, and
``OTEL_SDK_DISABLED=true`` to turn it all off.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from coder_es.audit.span_tree import Semconv
from coder_es.config.values import TelemetryConfig
from coder_es.errors import CoderESError

PROTOCOLS = ("http/protobuf", "grpc")
LATEST_OPT_IN = "gen_ai_latest_experimental"


class TelemetrySettingsError(CoderESError):
    """A telemetry variable or setting that cannot be used."""


@dataclass(frozen=True)
class TelemetrySettings:
    traces_endpoint: str
    metrics_endpoint: str
    protocol: str = "http/protobuf"
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 10.0
    resource: Mapping[str, Any] = field(default_factory=dict)
    semconv: Semconv = field(default_factory=lambda: Semconv(old=True, latest=False))
    max_queue_size: int = 2048

    @classmethod
    def resolve(
        cls, environ: Mapping[str, str], config: TelemetryConfig | None = None
    ) -> TelemetrySettings | None:
        """The settings, or None when telemetry is not configured (or turned off)."""
        config = config or TelemetryConfig()
        if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true" or not config.enabled:
            return None
        protocol = (
            environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
            or config.protocol
            or "http/protobuf"
        ).strip()
        if protocol not in PROTOCOLS:
            msg = (
                f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r} is not supported; "
                f"use one of {', '.join(PROTOCOLS)}"
            )
            raise TelemetrySettingsError(msg)
        base = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or config.endpoint
        traces = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        if not traces and not base:
            return None
        metrics = environ.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
        if protocol == "grpc":
            # gRPC endpoints name the collector, not a path.
            traces = traces or base or ""
            metrics = metrics or base or traces
        else:
            traces = traces or _signal_url(base or "", "traces")
            metrics = metrics or (_signal_url(base, "metrics") if base else _sibling(traces))
        for name, url in (("traces", traces), ("metrics", metrics)):
            if not url.startswith(("http://", "https://")):
                msg = f"the OTLP {name} endpoint {url!r} is not an http(s) URL"
                raise TelemetrySettingsError(msg)
        try:
            timeout = float(environ.get("OTEL_EXPORTER_OTLP_TIMEOUT", "10000")) / 1000
        except ValueError:
            raise TelemetrySettingsError(
                "OTEL_EXPORTER_OTLP_TIMEOUT must be milliseconds"
            ) from None
        resource: dict[str, Any] = {"service.name": config.service_name or "coder-es"}
        resource.update(
            _pairs(environ.get("OTEL_RESOURCE_ATTRIBUTES", ""), "OTEL_RESOURCE_ATTRIBUTES")
        )
        if environ.get("OTEL_SERVICE_NAME"):
            resource["service.name"] = environ["OTEL_SERVICE_NAME"]
        opt_in = {v.strip() for v in environ.get("OTEL_SEMCONV_STABILITY_OPT_IN", "").split(",")}
        latest = LATEST_OPT_IN in opt_in or bool(config.latest_conventions)
        capture = content_opted_in(environ, config)
        headers = _pairs(
            environ.get("OTEL_EXPORTER_OTLP_TRACES_HEADERS")
            or environ.get("OTEL_EXPORTER_OTLP_HEADERS", ""),
            "OTEL_EXPORTER_OTLP_HEADERS",
        )
        return cls(
            traces_endpoint=traces,
            metrics_endpoint=metrics,
            protocol=protocol,
            headers=headers,
            timeout_s=timeout,
            resource=resource,
            semconv=Semconv(old=not latest, latest=latest, capture_content=capture),
        )


def content_opted_in(environ: Mapping[str, str], config: TelemetryConfig) -> bool:
    """The content opt-in: ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``, else
    ``telemetry.capture_content``. Live telemetry and ``export --format otel`` both follow it."""
    capture_text = environ.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
    if capture_text is not None:
        return capture_text.strip().lower() == "true"
    return bool(config.capture_content)


def _signal_url(base: str, signal: str) -> str:
    return base.rstrip("/") + f"/v1/{signal}"


def _sibling(traces: str) -> str:
    """The metrics URL beside a traces URL that ends in the standard path."""
    if traces.endswith("/v1/traces"):
        return traces[: -len("traces")] + "metrics"
    return traces


def _pairs(text: str, name: str) -> dict[str, str]:
    """``key=value,key2=value2`` (values percent-decoded), as the OTLP variables are written."""
    out: dict[str, str] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise TelemetrySettingsError(f"{name}: {item.strip()!r} is not key=value")
        out[unquote(key.strip())] = unquote(value.strip())
    return out
