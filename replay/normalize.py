"""What a replay compares: events and requests under a documented normalization.

Two runs of the same code on the same inputs differ only in things that are not behaviour. The
normalization removes exactly those, on both sides, before anything is compared:

- **timestamps** and the **hash chain** (``prev_hash``): every event's timestamp is fresh, and the
  chain hash covers it;
- **durations**: ``ToolCallCompleted.duration_ms``, and durations printed in text (``0.03s``,
  ``12 ms``, ``1.5 seconds``: a number followed by a time unit) become ``<duration>``, because a
  re-executed test run reports its own timing;
- **the workspace path**: a replay runs in a scratch directory, so the recorded workspace path and
  the scratch path both become ``<workspace>`` wherever they appear in a string;
- **sealed-value ids**: a marker ``[REDACTED:<kind>:<name>:<id>]`` becomes
  ``[REDACTED:<kind>:<name>]``: the id names a value in one store's sealed-secret store (keyed per
  session), so a value the replay had to seal again gets another id for the same secret;
- **secrets**: with a ``redactor`` (the replay's), a string is redacted before comparing: the
  recording holds the redacted form, while a live replay resolves ``env:NAME`` markers from the
  environment and sees the real values again in its tools' output;
- **request bookkeeping**: ``ModelResponded.request_digest`` names a delta-encoded manifest whose
  bytes depend on process boundaries (the request itself is compared separately, in full), and
  ``raw_stream_blob`` is a transport capture a replayed stream does not have;
- **who parked or answered a question**: ``TurnParked.by`` and ``DeferredAnswered.by`` name the
  host, process and client where the recording ran (the decision itself is compared).

Ids need no normalization: the session id is reused, node ids are event versions, and tool-use ids
come from the recorded model responses.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from coder_es.redaction import Redactor

WORKSPACE = "<workspace>"
DURATION = "<duration>"
_DURATION_RE = re.compile(r"(?<![\w.])\d+(?:\.\d+)?\s?(?:ms|s|sec|secs|seconds)\b")
_MARKER_ID_RE = re.compile(r"(\[REDACTED:[a-z]+:[A-Za-z0-9_.*?\-]+):[0-9a-f]{12}\]")

IGNORED_FIELDS: dict[str, frozenset[str]] = {
    # sealed_forms: digests of the redacted forms of sealed blobs, as one store keeps them (a
    # replay from a cassette holds no secret, so it seals nothing).
    "*": frozenset({"prev_hash", "sealed_forms"}),
    "ToolCallCompleted": frozenset({"duration_ms"}),
    "HookRan": frozenset({"duration_ms"}),
    "ModelResponded": frozenset({"request_digest", "raw_stream_blob"}),
    # The process that parked a turn or answered its question (host, pid, client): where the
    # recording ran, not what the agent did (the decision itself is compared).
    "TurnParked": frozenset({"by"}),
    "DeferredAnswered": frozenset({"by"}),
}


@dataclass(frozen=True)
class Normalizer:
    """The normalization of one side (recorded or replayed): which paths are its workspace."""

    roots: tuple[str, ...] = ()
    redactor: Redactor | None = None

    @classmethod
    def for_workspace(cls, *paths: str | os.PathLike[str] | None) -> Normalizer:
        roots: set[str] = set()
        for p in paths:
            if not p:
                continue
            text = os.fspath(p).rstrip("/") or "/"
            if text != "/":
                roots.add(text)
                roots.add(os.path.realpath(text))
        # Longest first, so a path never leaves a suffix of a longer one behind.
        return cls(tuple(sorted(roots, key=lambda r: (-len(r), r))))

    def text(self, value: str) -> str:
        if self.redactor is not None:
            value = self.redactor.redact_text(value)
        for root in self.roots:
            if root in value:
                value = value.replace(root, WORKSPACE)
        if "[REDACTED:" in value:
            value = _MARKER_ID_RE.sub(r"\1]", value)
        return _DURATION_RE.sub(DURATION, value)

    def value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return value

    def event(self, kind: str, fields: dict[str, Any]) -> dict[str, Any]:
        """The comparable form of one event: its kind and its normalized fields."""
        return {"kind": kind, "fields": self.value(compared_fields(kind, fields))}


def compared_fields(kind: str, fields: dict[str, Any]) -> dict[str, Any]:
    """The fields a comparison looks at (before normalizing their values)."""
    ignored = IGNORED_FIELDS["*"] | IGNORED_FIELDS.get(kind, frozenset())
    return {k: v for k, v in fields.items() if k not in ignored}


def ignored_fields(kind: str) -> Iterable[str]:
    return sorted(IGNORED_FIELDS["*"] | IGNORED_FIELDS.get(kind, frozenset()))
