"""Sending a session's spans and GenAI metrics to an OTLP collector while it runs.

``LiveTelemetry`` is owned by one process object (the CLI's context, a fleet worker) and
attached to its ``CoderApp``: after every save it decodes the events just recorded, in their
stored form (secrets already sealed, redaction markers in place: nothing unsealed leaves), feeds
them to a ``SpanTree`` per session and hands each finished span to a ``BatchSpanProcessor``.
Everything it sends is derived from the events; its only state is the open spans of the
current turns, which the events rebuild.

Exporting never blocks or fails a turn: the processor's queue is bounded and its thread does the
network work; an observer error is reported and swallowed. A collector that does not answer is
reported once (one line on stderr); its spans are dropped, counted, and the count reported when
the telemetry is closed. No global tracer or meter provider is set: the providers live and die
with this object.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, TextIO

import msgspec
from opentelemetry.context import Context
from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter, MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from coder_es._version import __version__
from coder_es.audit.records import AuditEvent, EventDecoder, decode_utf8_json
from coder_es.audit.span_tree import (
    KIND_CLIENT,
    SpanRecord,
    SpanTree,
    nanos,
    span_number,
    trace_id,
)
from coder_es.domain.chain import canonical_json
from coder_es.telemetry.settings import TelemetrySettings

SCOPE = InstrumentationScope("coder_es.telemetry", __version__)
# The conventions' recommended bucket boundaries for the two GenAI client histograms.
TOKEN_BUCKETS = [4**i for i in range(14)]
DURATION_BUCKETS = [0.01 * 2**i for i in range(14)]
RETRY_AFTER_S = 30.0
NEVER_ANSWERED_GRACE_S = 0.5

# The exporters log every failed batch; a library adds a NullHandler so that an application
# without logging set up does not print them (ours reports once itself). Handlers the
# application configured still receive them.
logging.getLogger("opentelemetry").addHandler(logging.NullHandler())


def _report_to_stderr(line: str) -> None:
    stream: TextIO = sys.stderr
    stream.write(line + "\n")
    stream.flush()


class ReportingExporter(SpanExporter):
    """Counts what was sent and what was lost; after a failure it drops batches for a while
    instead of retrying against a collector that is not there."""

    def __init__(
        self,
        inner: SpanExporter,
        where: str,
        report: Callable[[str], None],
        before_export: Callable[[], None] = lambda: None,
    ) -> None:
        self.inner = inner
        self.where = where
        self.report = report
        self.before_export = before_export
        self.exported = 0
        self.dropped = 0
        self.failures = 0
        self._down_until = 0.0
        self._shut = False
        self._lock = threading.Lock()

    @property
    def failing(self) -> bool:
        return self._down_until > 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.before_export()
        if time.monotonic() < self._down_until:
            with self._lock:
                self.dropped += len(spans)
            return SpanExportResult.FAILURE
        try:
            result = self.inner.export(spans)
        except Exception:  # an exporter bug must not end the processor's thread
            result = SpanExportResult.FAILURE
        with self._lock:
            if result is SpanExportResult.SUCCESS:
                self.exported += len(spans)
                self._down_until = 0.0
                return result
            self.dropped += len(spans)
            self.failures += 1
            self._down_until = time.monotonic() + RETRY_AFTER_S
            first = self.failures == 1
        if first:
            self.report(
                f"coder-es: telemetry: the OTLP collector at {self.where} did not accept spans; "
                "they are dropped while it does not answer (the count is reported at exit)"
            )
        return result

    def shutdown(self) -> None:
        with self._lock:
            if self._shut:
                return
            self._shut = True
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def _span_exporter(settings: TelemetrySettings) -> SpanExporter:
    headers = dict(settings.headers)
    if settings.protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GrpcSpanExporter,
            )
        except ImportError as e:
            from coder_es.telemetry.settings import TelemetrySettingsError

            msg = "OTLP over gRPC needs opentelemetry-exporter-otlp-proto-grpc installed"
            raise TelemetrySettingsError(msg) from e
        return GrpcSpanExporter(
            endpoint=settings.traces_endpoint, headers=headers, timeout=settings.timeout_s
        )
    from coder_es.telemetry.otlp_http import ProtobufSpanExporter

    return ProtobufSpanExporter(
        endpoint=settings.traces_endpoint, headers=headers, timeout=settings.timeout_s
    )


def _metric_reader(settings: TelemetrySettings) -> MetricReader:
    headers = dict(settings.headers)
    if settings.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
            OTLPMetricExporter as GrpcMetricExporter,
        )

        exporter: Any = GrpcMetricExporter(
            endpoint=settings.metrics_endpoint, headers=headers, timeout=settings.timeout_s
        )
    else:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        exporter = OTLPMetricExporter(
            endpoint=settings.metrics_endpoint, headers=headers, timeout=settings.timeout_s
        )
    return PeriodicExportingMetricReader(exporter)


_KINDS = {KIND_CLIENT: SpanKind.CLIENT}
# The attributes of a chat span its metrics are recorded with (the token type aside).
METRIC_KEYS = (
    "gen_ai.operation.name",
    "gen_ai.provider.name",
    "gen_ai.system",
    "gen_ai.request.model",
    "gen_ai.response.model",
)
SAMPLED = TraceFlags(TraceFlags.SAMPLED)
UNSET = Status(StatusCode.UNSET)
NO_CONTEXT = Context()  # recording never reads the current one (see exemplar_filter)
_PRIMITIVE = frozenset((bool, int, float, str))


def _plain_attributes(attributes: dict[str, Any]) -> dict[str, Any]:
    """OpenTelemetry attribute values: no None, sequences of one primitive type, else text."""
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        if type(value) in _PRIMITIVE:  # nearly every value: one set lookup
            out[key] = value
        elif value is None:
            continue
        elif isinstance(value, (bool, int, float, str)):
            out[key] = value
        elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            out[key] = list(value)
        else:
            out[key] = canonical_json(value)
    return out


class LiveTelemetry:
    """Spans and metrics of the sessions saved through the applications it is attached to."""

    def __init__(
        self,
        settings: TelemetrySettings,
        *,
        span_exporter: SpanExporter | None = None,
        metric_reader: MetricReader | None = None,
        report: Callable[[str], None] = _report_to_stderr,
        schedule_delay_millis: float = 1000,
    ) -> None:
        self.settings = settings
        self.report = report
        self.resource = Resource(dict(settings.resource))
        self.exporter = ReportingExporter(
            span_exporter or _span_exporter(settings),
            settings.traces_endpoint,
            report,
            before_export=self.record_metrics,
        )
        self.processor = BatchSpanProcessor(
            self.exporter,
            max_queue_size=settings.max_queue_size,
            schedule_delay_millis=schedule_delay_millis,
        )
        self.meters = MeterProvider(
            metric_readers=[metric_reader or _metric_reader(settings)],
            resource=self.resource,
            # Exemplars come from the span active when a value is recorded: there never is one
            # (spans are built from events), so the SDK need not look for it on every record.
            exemplar_filter=AlwaysOffExemplarFilter(),
        )
        meter = self.meters.get_meter(SCOPE.name, SCOPE.version)
        self.token_usage = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Number of input and output tokens used",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
        )
        self.duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="GenAI operation duration",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.submitted = 0
        self._trace_ids: dict[str, int] = {}
        self._parent_context: tuple[tuple[str, str], SpanContext] | None = None
        self._metric_attributes: dict[tuple[Any, ...], tuple[dict[str, Any], ...]] = {}
        # Chat measurements not recorded yet: (attribute sets, seconds, input, output tokens).
        self._measurements: deque[tuple[tuple[dict[str, Any], ...], float, Any, Any]] = deque()
        self._trees: dict[str, SpanTree] = {}
        self._decoders: dict[int, EventDecoder] = {}
        self._closed = False
        self._observer_failed = False

    # ------------------------------------------------------------------ feeding

    def attach(self, app: Any) -> None:
        """Follow every save of ``app`` (a ``CoderApp``)."""
        app.save_observers.append(lambda recordings: self.observe(app, recordings))

    def observe(self, app: Any, recordings: Sequence[Any]) -> None:
        """The events of one save, in their stored form. Never raises: telemetry must not fail
        the save it follows."""
        try:
            decoder = self._decoders.get(id(app))
            if decoder is None:
                decoder = self._decoders[id(app)] = EventDecoder(app.mapper, _decode_json)
            for recording in recordings:
                event = _stored_form(decoder, recording.notification)
                if event.session not in self._trees and event.kind != "Started":
                    self.begin_session(event.session, _started(app, decoder, recording))
                self.feed(event)
        except Exception as e:
            if not self._observer_failed:
                self._observer_failed = True
                self.report(f"coder-es: telemetry: events not exported: {type(e).__name__}: {e}")

    @property
    def open_sessions(self) -> tuple[str, ...]:
        """Sessions with spans not sent yet (a turn still running)."""
        return tuple(session for session, tree in self._trees.items() if tree.turn_open)

    def begin_session(self, session: str, started: dict[str, Any]) -> None:
        """Follow ``session`` from an event after its ``Started`` (given here)."""
        self._trees[session] = SpanTree(session, self.settings.semconv, started)

    def feed(self, event: AuditEvent) -> None:
        tree = self._trees.get(event.session)
        if tree is None:
            tree = self._trees[event.session] = SpanTree(event.session, self.settings.semconv)
        for span in tree.feed(event):
            self._emit(event.session, span)

    def finish_session(self, session: str) -> None:
        """Send the spans still open for ``session`` (its last turn). The tree stays: it knows
        the agent and model the session's next turn runs with."""
        tree = self._trees.get(session)
        for span in tree.finish() if tree is not None else ():
            self._emit(session, span)

    def _trace(self, session: str) -> int:
        trace = self._trace_ids.get(session)
        if trace is None:
            trace = self._trace_ids[session] = int(trace_id(session), 16)
        return trace

    def _parent(self, session: str, trace: int, key: str) -> SpanContext:
        """The context of a turn span, made once for all the spans under it."""
        cached = self._parent_context
        if cached is not None and cached[0] == (session, key):
            return cached[1]
        context = SpanContext(trace, span_number(session, key), False, SAMPLED)
        self._parent_context = ((session, key), context)
        return context

    def _emit(self, session: str, span: SpanRecord) -> None:
        if self._closed:
            return
        trace = self._trace(session)
        parent = self._parent(session, trace, span.parent) if span.parent is not None else None
        status = Status(StatusCode.ERROR, span.error) if span.error is not None else UNSET
        start, end = nanos(span.start), nanos(span.end)
        readable = ReadableSpan(
            name=span.name,
            context=SpanContext(trace, span_number(session, span.key), False, SAMPLED),
            parent=parent,
            resource=self.resource,
            attributes=_plain_attributes(span.attributes),
            events=[
                Event(e.name, _plain_attributes(e.attributes), nanos(e.timestamp))
                for e in span.events
            ],
            kind=_KINDS.get(span.kind, SpanKind.INTERNAL),
            status=status,
            start_time=start,
            end_time=end,
            instrumentation_scope=SCOPE,
        )
        self.submitted += 1
        self.processor.on_end(readable)
        if span.attributes.get("gen_ai.operation.name") == "chat":
            self._record_metrics(span, (end - start) / 1e9)

    def _record_metrics(self, span: SpanRecord, seconds: float) -> None:
        """Queue a chat's measurements; the batch thread records them (``record_metrics``): the
        SDK's per-record work (attribute cleaning, hashing, locking) stays off the loop."""
        a = span.attributes
        key = tuple(a.get(k) for k in METRIC_KEYS)
        cached = self._metric_attributes.get(key)
        if cached is None:
            # A session uses a model or two: the attribute sets are built once, not per call.
            common = _plain_attributes(dict(zip(METRIC_KEYS, key, strict=True)))
            cached = self._metric_attributes[key] = (
                common,
                {**common, "gen_ai.token.type": "input"},
                {**common, "gen_ai.token.type": "output"},
            )
        inputs, outputs = a.get("gen_ai.usage.input_tokens"), a.get("gen_ai.usage.output_tokens")
        self._measurements.append((cached, seconds, inputs, outputs))

    def record_metrics(self) -> None:
        """Record the queued measurements in the histograms (before each span batch is sent,
        and at close)."""
        queued = self._measurements
        while True:
            try:  # close() may drain beside a batch thread that outlived its grace
                (common, as_input, as_output), seconds, inputs, outputs = queued.popleft()
            except IndexError:
                return
            self.duration.record(seconds, common, NO_CONTEXT)
            if isinstance(inputs, int):
                self.token_usage.record(inputs, as_input, NO_CONTEXT)
            if isinstance(outputs, int):
                self.token_usage.record(outputs, as_output, NO_CONTEXT)

    # ------------------------------------------------------------------ ending

    def close(self) -> None:
        """Send the open spans, stop the threads, and say how many spans were lost. A collector
        that never answered is not waited for; one that did gets the export timeout."""
        if self._closed:
            return
        for session in list(self._trees):
            self.finish_session(session)
        self._closed = True
        grace = self.settings.timeout_s if self.exporter.exported else NEVER_ANSWERED_GRACE_S
        stopping = threading.Thread(target=self.processor.shutdown, daemon=True)
        stopping.start()
        stopping.join(grace)
        if stopping.is_alive():
            # Interrupt a retry's back-off: its batch is dropped (and counted).
            self.exporter.shutdown()
            stopping.join(self.settings.timeout_s)
        self.record_metrics()  # those of spans the processor never got to export
        timeout = int(grace * 1000)
        try:
            self.meters.shutdown(timeout_millis=timeout)
        except Exception:  # the metrics' own failures are not worth a traceback at exit
            pass
        lost = self.submitted - self.exporter.exported
        if lost > 0:
            self.report(
                f"coder-es: telemetry: {lost} of {self.submitted} span(s) were not exported to "
                f"{self.settings.traces_endpoint}"
            )


_msgspec_decode = msgspec.json.Decoder().decode


def _decode_json(raw: bytes) -> Any:
    """msgspec's decoder (~3x json's on an event's state), json's where msgspec refuses what
    json takes (NaN, lone surrogates): the same values either way."""
    try:
        return _msgspec_decode(raw)
    except msgspec.DecodeError:
        return decode_utf8_json(raw)


def _stored_form(decoder: EventDecoder, stored: Any) -> AuditEvent:
    """The event as recorded, without its chain hash (spans do not carry it; skipping the
    hash keeps the work per save small)."""
    fields, stamp = decoder.state(stored)
    class_version = fields.pop("class_version", None)
    return AuditEvent(
        session=decoder.session_str(stored.originator_id),
        version=stored.originator_version,
        topic=stored.topic,
        timestamp=stamp,
        fields=fields,
        chain_hash="",
        class_version=class_version,
    )


def _started(app: Any, decoder: EventDecoder, recording: Any) -> dict[str, Any]:
    """The settings of a session first seen mid-way (resumed by ``run --session``): its
    ``Started`` fields, updated by the last ``SettingsChanged`` before this save. Read once
    per session and process; only those two kinds of event are decoded."""
    stored = recording.notification
    earlier = app.recorder.select_events(stored.originator_id, lte=stored.originator_version - 1)
    fields: dict[str, Any] = {}
    for event in earlier:
        kind = event.topic.rsplit(".", 1)[-1].rsplit(":", 1)[-1]
        if kind == "Started":
            fields = dict(_stored_form(decoder, event).fields)
        elif kind == "SettingsChanged":
            changed = _stored_form(decoder, event).fields
            fields.update(
                agent=changed.get("agent"),
                provider=changed.get("provider"),
                model=changed.get("model"),
            )
    return fields
