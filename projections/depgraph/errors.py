"""Errors raised by the dependency graph."""

from __future__ import annotations

from coder_es.errors import CoderESError, UsageError


class DepGraphError(CoderESError):
    """The dependency graph cannot do what was asked."""


class UnknownFileError(DepGraphError, UsageError):
    """A query named a file that is not in the graph."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(f"{path!r} is not a source file in the dependency graph")


class BadPathError(DepGraphError, UsageError):
    """A change named a path that is absolute or escapes the workspace root."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(f"{path!r} is not a relative path inside the workspace")
