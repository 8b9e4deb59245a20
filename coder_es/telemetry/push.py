"""``coder-es export SESSION --format otel --push``: a recorded session's span tree sent to the
configured OTLP collector, through the same exporter as live telemetry."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from coder_es.audit.prepared import PreparedExport
from coder_es.telemetry.live import LiveTelemetry
from coder_es.telemetry.settings import TelemetrySettings


@dataclass(frozen=True)
class PushResult:
    endpoint: str
    spans: int
    exported: int

    @property
    def lost(self) -> int:
        return self.spans - self.exported


def push_session(
    prepared: PreparedExport,
    settings: TelemetrySettings,
    report: Callable[[str], None],
    telemetry: LiveTelemetry | None = None,
) -> PushResult:
    telemetry = telemetry or LiveTelemetry(settings, report=report)
    telemetry.begin_session(prepared.session, prepared.started())
    for event in prepared.events:
        telemetry.feed(event)
    telemetry.close()
    return PushResult(settings.traces_endpoint, telemetry.submitted, telemetry.exporter.exported)
