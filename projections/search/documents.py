"""What the search index holds: the searchable text of an event, in its stored (redacted) form.

An event gives zero or more ``Doc``s, each naming the session, the conversation node it belongs
to and its kind:

    user        the text of a user message                       (node: the message)
    assistant   the text blocks of a model response              (node: the response)
    tool        a tool call's name and input                     (node: the response asking)
                a tool call's output, the whole blob if stored   (node: the result)
    file        the paths a tool call changed                    (node: the result)

Only what the store holds in clear is read: the events as stored (secrets already replaced by
``[REDACTED:...]`` markers) and, for an output kept in a blob, ``BlobStore.stored_form`` (a
sealed blob's redacted form). Sealed values are never opened here, so they are never indexed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from coder_es.records import event_kind

KINDS = ("user", "assistant", "tool", "file")
MAX_TEXT = 256 * 1024
"""Characters of one text that are indexed (the start of a huge output or pasted file):
PostgreSQL's tsvector holds at most 1 MB, and a search is for finding, not for reading."""

# Snippets are marked with these two control characters, so they are kept out of indexed text.
MARK_START, MARK_END = "\x02", "\x03"
_CLEAN = str.maketrans({MARK_START: " ", MARK_END: " ", "\x00": " "})

StoredBlob = Callable[[str], bytes | None]
"""The stored form of a blob by digest, or None when it is missing."""


Entries = list[tuple[int, list["Doc"]]]
"""What an index adds at once: each notification id with the documents of its event."""


@dataclass(frozen=True)
class Doc:
    session: str
    version: int
    """The version of the event the text comes from."""
    node: str
    kind: str
    timestamp: float
    """Seconds since the epoch (UTC)."""
    text: str


def clean_text(text: str) -> str:
    """Text a database accepts: at most ``MAX_TEXT`` characters, lone surrogates (non-UTF-8
    file names) shown escaped, NUL and the snippet marks replaced."""
    text = text[:MAX_TEXT]
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text.translate(_CLEAN)


def _flatten(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return "\n".join(_flatten(v) for v in value.values())
    if isinstance(value, list):
        return "\n".join(_flatten(v) for v in value)
    return json.dumps(value, ensure_ascii=True, default=str)


def documents(event: Any, stored_blob: StoredBlob) -> list[Doc]:
    """The searchable texts of one stored event (empty for events that carry none)."""
    kind = event_kind(event)
    version = int(event.originator_version)
    own_node = str(version)
    texts: list[tuple[str, str, str]] = []  # (node, kind, text)
    if kind == "UserMessageAdded":
        texts.append((own_node, "user", _blocks_text(event.content)))
    elif kind == "ModelResponded":
        texts.append((own_node, "assistant", _blocks_text(event.blocks)))
    elif kind == "ToolCallRequested":
        texts.append((str(event.node), "tool", f"{event.name}\n{_flatten(event.input)}"))
    elif kind == "ToolCallCompleted":
        output = event.output
        if event.output_blob:
            stored = stored_blob(event.output_blob)
            if stored is not None:
                output = stored[: MAX_TEXT * 4].decode("utf-8", "replace")
        texts.append((own_node, "tool", f"{event.name}\n{output}"))
        paths = [str(c.get("path", "")) for c in event.files_changed if isinstance(c, dict)]
        texts.append((own_node, "file", "\n".join(p for p in paths if p)))
    session = str(event.originator_id)
    stamp = event.timestamp.timestamp()
    return [
        Doc(session, version, node, k, stamp, clean_text(text))
        for node, k, text in texts
        if text.strip()
    ]


def _blocks_text(blocks: list[dict[str, Any]]) -> str:
    return "\n".join(
        str(b.get("text", "")) for b in blocks if isinstance(b, dict) and b.get("type") == "text"
    )
