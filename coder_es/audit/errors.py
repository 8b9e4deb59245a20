"""Errors of the audit trail."""

from __future__ import annotations

from coder_es.errors import CoderESError, UsageError


class AuditError(CoderESError):
    """An audit operation could not be completed."""


class UnreadableExportError(UsageError):
    """A file given to ``verify`` cannot be read, or is not a coder-es export at all."""


class ExportOptionError(UsageError):
    """An export option is malformed (a time, an event kind, a branch node, a format)."""
