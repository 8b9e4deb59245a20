"""The audit trail: hash-chain verification, anchors, exports (JSONL, OTLP/JSON, Markdown, HTML).

See ``verify`` (store and file verification), ``anchor`` (the witness against truncation),
``export`` (filters, export-time redaction, formats) and ``coder_es.redaction`` (record-time
redaction of secrets).
"""

from importlib import import_module
from typing import Any

# Imported on first use: the application imports ``anchor`` on every start, and the exporters
# (rendering, OTLP) are only needed by ``export`` and ``verify``.
_PUBLIC = {
    "ExportOptions": "export",
    "export_session": "export",
    "ExportFilter": "filters",
    "Problem": "problems",
    "VerifyReport": "problems",
    "verify_export": "verify",
    "verify_session": "verify",
    "verify_store": "verify",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        return getattr(import_module(f"coder_es.audit.{_PUBLIC[name]}"), name)
    raise AttributeError(f"module 'coder_es.audit' has no attribute {name!r}")
