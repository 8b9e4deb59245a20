"""The per-session hash chain that makes the log tamper-evident.

Each event commits to the previous event's hash (its ``prev_hash`` field) and to its own
content, session id and version. The hash is computed over a canonical JSON form that does not
depend on how a backend stores the event, so a verifier can recompute it from any store or from an
exported file.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any
from uuid import UUID

from coder_es.store.surrogates import _SURROGATE, escape_surrogates

GENESIS = ""
SEALED_FORMS = "sealed_forms"
"""An event's extra field: {blob digest: sha256 of its stored (redacted) form}, for the sealed
blobs it names (``Session.trigger_event``); covered by the chain like every field."""


def canonical_json(value: Any) -> str:
    """Deterministic JSON: sorted keys, no insignificant whitespace, UTF-8 kept as is, lone
    surrogates escaped (``escape_surrogates``)."""
    return escape_surrogates(
        json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_default
        )
    )


def shown_in_json(json_text: str) -> str:
    """JSON text with every lone surrogate replaced by ``shown``'s escape, as JSON string
    content (for text that leaves the machine, like a model request: what a person reads)."""
    if json_text.isascii():
        return json_text
    return _SURROGATE.sub(lambda m: shown(m.group()).replace("\\", "\\\\"), json_text)


def shown(text: str) -> str:
    """``text`` as a user should see it: the bytes of a non-UTF-8 file name as ``\\xE9`` escapes
    (the convention of ``escape_surrogates``' callers) instead of characters no terminal prints."""
    if text.isascii() or not _SURROGATE.search(text):
        return text
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate no byte maps to: show its code point
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, bytes):
        return value.hex()
    msg = f"value of type {type(value).__name__} has no canonical JSON form"
    raise TypeError(msg)


def event_hash(
    session_id: UUID | str,
    version: int,
    topic: str,
    timestamp: datetime | str,
    fields: dict[str, Any],
) -> str:
    """The chain hash of one event. ``fields`` include ``prev_hash``."""
    body = {
        "session": str(session_id),
        "version": version,
        "topic": topic,
        "timestamp": timestamp.isoformat() if isinstance(timestamp, datetime) else timestamp,
        "fields": fields,
    }
    return hashlib.sha256(canonical_json(body).encode()).hexdigest()
