"""What a verification reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Problem kinds. The first four are what the issue calls tampering with events.
MODIFIED = "modified"
DELETED = "deleted"
INSERTED = "inserted"
REORDERED = "reordered"
TRUNCATED = "truncated"  # events after the last one present are gone (anchor or export trailer)
BLOB_CORRUPT = "blob_corrupt"
BLOB_MISSING = "blob_missing"
MALFORMED = "malformed"  # an export line or header that cannot be understood
UNDECODABLE = "undecodable"  # a stored event (or row) that cannot be read back at all
LOST = "lost"  # sessions the witness outside the store saw that the store no longer has


@dataclass(frozen=True)
class Problem:
    session: str
    version: int | None
    kind: str
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "version": self.version,
            "kind": self.kind,
            "detail": self.detail,
        }

    def __str__(self) -> str:
        # Only a stored row whose session cannot be read has no session outside an export.
        where = (
            f"session {self.session}"
            if self.session
            else ("store" if self.kind in (UNDECODABLE, LOST) else "export")
        )
        if self.version is not None:
            where += f" version {self.version}"
        return f"{where}: {self.kind}: {self.detail}"


@dataclass(frozen=True)
class SessionHead:
    session: str
    version: int
    hash: str


@dataclass(frozen=True)
class VerifyReport:
    target: str
    """What was verified: a session id, ``--all`` or a file path."""
    sessions: int
    events: int
    blobs: int
    problems: tuple[Problem, ...]
    heads: tuple[SessionHead, ...] = field(default=())
    """The head (last version and its chain hash) of each session checked: a witness a user can
    keep elsewhere to detect later truncation of the whole store."""
    notes: tuple[str, ...] = field(default=())
    """Facts that are not problems (events redacted at export: their content is not checked)."""

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "ok": self.ok,
            "sessions": self.sessions,
            "events": self.events,
            "blobs": self.blobs,
            "problems": [p.to_json() for p in self.problems],
            "heads": [
                {"session": h.session, "version": h.version, "hash": h.hash} for h in self.heads
            ],
            "notes": list(self.notes),
        }
