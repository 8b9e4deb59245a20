"""Starting live telemetry for an application when it is configured: the one entry point the
CLI's context and the fleet worker call. The SDK is only imported when an endpoint is set, so
commands pay nothing for telemetry they do not use."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from coder_es.config.values import TelemetryConfig

if TYPE_CHECKING:
    from coder_es.telemetry.live import LiveTelemetry


def start_telemetry(
    app: Any, config: TelemetryConfig | None = None, environ: Mapping[str, str] | None = None
) -> LiveTelemetry | None:
    """A ``LiveTelemetry`` following ``app``'s saves, or None when none is configured. Settings
    that cannot be used are reported on stderr and leave telemetry off: a telemetry problem
    never stops a session (``export --push`` resolves them itself and fails instead)."""
    env = os.environ if environ is None else environ
    if not (config is not None and config.endpoint) and not any(
        name.startswith("OTEL_EXPORTER_OTLP_") for name in env
    ):
        # Nothing configured: the settings (and the span tree they import) stay unloaded.
        return None
    from coder_es.telemetry.settings import TelemetrySettings, TelemetrySettingsError

    try:
        settings = TelemetrySettings.resolve(env, config)
    except TelemetrySettingsError as e:
        print(f"coder-es: telemetry off: {e}", file=sys.stderr)
        return None
    if settings is None:
        return None
    try:
        from coder_es.telemetry.live import LiveTelemetry

        telemetry = LiveTelemetry(settings)
    except (ImportError, TelemetrySettingsError) as e:
        hint = " (pip install 'coder-es[telemetry]')" if isinstance(e, ImportError) else ""
        print(f"coder-es: telemetry off: {e}{hint}", file=sys.stderr)
        return None
    telemetry.attach(app)
    return telemetry
