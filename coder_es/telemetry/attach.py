"""Starting live telemetry for an application when it is configured: the one entry point the
CLI's context and the fleet worker call. The SDK is only imported when an endpoint is set, so
commands pay nothing for telemetry they do not use."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from coder_es.config.values import TelemetryConfig

if TYPE_CHECKING:
    from coder_es.telemetry.live import LiveTelemetry


def start_telemetry(
    app: Any, config: TelemetryConfig | None = None, environ: Mapping[str, str] | None = None
) -> LiveTelemetry | None:
    """A ``LiveTelemetry`` following ``app``'s saves, or None when none is configured."""
    from coder_es.telemetry.settings import TelemetrySettings

    settings = TelemetrySettings.resolve(os.environ if environ is None else environ, config)
    if settings is None:
        return None
    try:
        from coder_es.telemetry.live import LiveTelemetry
    except ImportError as e:
        from coder_es.telemetry.settings import TelemetrySettingsError

        msg = f"live telemetry needs the telemetry extra (pip install 'coder-es[telemetry]'): {e}"
        raise TelemetrySettingsError(msg) from e
    telemetry = LiveTelemetry(settings)
    telemetry.attach(app)
    return telemetry
