"""The error hierarchy. Every error coder_es raises on purpose is a ``CoderESError``.

The CLI maps ``UsageError`` (and its subclasses) to exit code 2 and every other ``CoderESError`` to
a one-line message; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class CoderESError(Exception):
    """Base class of all coder_es errors."""


class UsageError(CoderESError):
    """Bad input from the user: an unknown id, an unreadable file, a malformed option."""


class StoreError(CoderESError):
    """The store cannot be opened or written. The message names the store."""


DAMAGED_STORE_ADVICE = (
    "restore the store directory from a backup, or move it aside to start an empty store "
    "(coder-es verify --all then reports the sessions it lost)"
)
"""What a user can do about a damaged store file (said by every message that finds one)."""


class SessionNotFoundError(UsageError):
    def __init__(
        self, ref: str, candidates: list[str] | None = None, *, store: str | None = None
    ) -> None:
        self.ref = ref
        self.candidates = candidates or []
        self.store = store
        hint = f" (matches: {', '.join(self.candidates)})" if self.candidates else ""
        where = f" in the store {store}" if store else ""
        super().__init__(f"no unique session matches {ref!r}{where}{hint}")


class UnknownNodeError(UsageError):
    def __init__(
        self,
        session: str,
        ref: str,
        candidates: list[str] | None = None,
        reason: str | None = None,
    ) -> None:
        self.session = session
        self.ref = ref
        self.candidates = candidates or []
        hint = f" (matches: {', '.join(self.candidates)})" if self.candidates else ""
        if reason:
            hint += f": {reason}"
        super().__init__(f"session {session}: no unique node or label matches {ref!r}{hint}")


class BlobNotFoundError(StoreError):
    def __init__(self, digest: str) -> None:
        self.digest = digest
        super().__init__(f"blob {digest} is not in the store")


class SessionBusyError(CoderESError):
    """Another process (or handle) holds the session's lease: one writer per session."""

    def __init__(self, session: str, holder: str | None) -> None:
        self.session = session
        self.holder = holder
        who = holder or "held by another process that has not said which"
        super().__init__(f"session {session} is busy ({who})")
