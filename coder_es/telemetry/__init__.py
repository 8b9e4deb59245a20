"""Live telemetry: the session's span tree and the GenAI metrics, sent through OpenTelemetry's SDK
to an OTLP collector while the session runs (``coder_es.telemetry.live``), configured by the
standard ``OTEL_*`` variables or the ``[telemetry]`` config table (``coder_es.telemetry.settings``).
"""
