"""Which blobs an event refers to (file snapshots, large tool outputs, raw model streams, images
in user messages)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from coder_es.audit.records import AuditEvent

_ENTRY_KEYS = ("base", "disk", "proposed", "target", "result", "before", "after")


_HEX = frozenset("0123456789abcdef")


def _is_digest(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 64 and set(value) <= _HEX


def blob_refs(event: AuditEvent) -> Iterator[tuple[str, str]]:
    """(digest, what it is) for every blob the event names. ``FileObserved`` hashes are left out:
    an observation records a hash, not necessarily a copy of the content."""
    kind, f = event.kind, event.fields
    if kind == "ToolCallCompleted":
        if _is_digest(f.get("output_blob")):
            yield f["output_blob"], "tool output"
        for change in f.get("files_changed") or []:
            # "proposed": a command's version that met a conflict, kept in the store; "own":
            # a merged command's own version (without the user's concurrent bytes).
            for key in ("before", "after", "proposed", "own"):
                if isinstance(change, dict) and _is_digest(change.get(key)):
                    yield change[key], f"{change.get('path')} ({key})"
    elif kind == "UserMessageAdded":
        for block in f.get("content") or []:
            if (
                isinstance(block, dict)
                and block.get("type") == "image"
                and _is_digest(block.get("blob"))
            ):
                yield block["blob"], f"image ({block.get('media_type')})"
    elif kind == "ModelResponded":
        if _is_digest(f.get("raw_stream_blob")):
            yield f["raw_stream_blob"], "raw model stream"
    elif kind == "ModelExchanged":
        # A harness's model request and answer, as the recording proxy saw them.
        for key, what in (("request_blob", "model request"), ("response_blob", "model response")):
            if _is_digest(f.get(key)):
                yield f[key], f"{what} ({f.get('path')})"
    elif kind == "HarnessRan":
        if _is_digest(f.get("stream_blob")):
            yield f["stream_blob"], "harness stream"
    elif kind == "EditApplied":
        for key in ("base", "disk", "proposed", "result"):
            if _is_digest(f.get(key)):
                yield f[key], f"{f.get('path')} ({key})"
    elif kind == "WorkspaceRestored":
        for entry in f.get("entries") or []:
            if not isinstance(entry, dict):
                continue
            for key in _ENTRY_KEYS:
                if _is_digest(entry.get(key)):
                    yield entry[key], f"{entry.get('path')} ({key})"


REF_KINDS = frozenset(
    {
        "UserMessageAdded",
        "ToolCallCompleted",
        "ModelResponded",
        "ModelExchanged",
        "HarnessRan",
        "EditApplied",
        "WorkspaceRestored",
    }
)
