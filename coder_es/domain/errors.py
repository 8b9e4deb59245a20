"""Domain errors (re-exported from ``coder_es.errors`` so the domain imports nothing else)."""

from coder_es.errors import UnknownNodeError, UsageError

__all__ = ["UnknownNodeError", "UsageError"]
