"""Errors of the workspace: each message says what was refused and what to do instead."""

from __future__ import annotations

from coder_es.errors import CoderESError, UsageError


class WorkspaceError(CoderESError):
    """A file operation in the workspace failed."""


class PathOutsideWorkspaceError(UsageError, WorkspaceError):
    """A path resolves outside the workspace root (through ``..``, an absolute path or a symlink).

    Reaching it needs an explicit permission: pass ``outside_ok=True`` (after the permission layer
    allowed it) or list its directory in the workspace's ``allowed_outside``.
    """

    def __init__(self, path: str, resolved: str, root: str) -> None:
        self.path = path
        self.resolved = resolved
        self.root = root
        via = "" if resolved == path else f" (it resolves to {resolved})"
        super().__init__(
            f"{path!r} is outside the workspace {root}{via}; reading or writing it needs an "
            "explicit permission"
        )


class InvalidPathError(UsageError, WorkspaceError):
    """An empty path, a path with a NUL byte, or a directory where a file is expected."""


class WriteConflictError(WorkspaceError):
    """The disk kept changing under a write: the compare-and-swap failed on every retry."""

    def __init__(self, path: str, attempts: int) -> None:
        self.path = path
        self.attempts = attempts
        super().__init__(
            f"{path}: the file kept changing on disk during {attempts} write attempts; "
            "nothing was written"
        )


class ProtectedPathError(UsageError, WorkspaceError):
    """A write to a path the agent's tools never write: the project's ``.coder-es/`` (its
    config could grant the agent permissions) or the user's coder-es directories."""

    def __init__(self, path: str, why: str) -> None:
        self.path = path
        super().__init__(f"{path!r} is never written by the agent's tools: {why}")
