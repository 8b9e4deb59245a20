"""The audit trail: hash-chain verification, anchors, exports (JSONL, OTLP/JSON, Markdown, HTML).

See ``verify`` (store and file verification), ``anchor`` (the witness against truncation),
``export`` (filters, export-time redaction, formats) and ``coder_es.redaction`` (record-time
redaction of secrets).
"""

from coder_es.audit.export import ExportOptions, export_session
from coder_es.audit.filters import ExportFilter
from coder_es.audit.problems import Problem, VerifyReport
from coder_es.audit.verify import verify_export, verify_session, verify_store

__all__ = [
    "ExportFilter",
    "ExportOptions",
    "Problem",
    "VerifyReport",
    "export_session",
    "verify_export",
    "verify_session",
    "verify_store",
]
