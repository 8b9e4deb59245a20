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

GENESIS = ""


def canonical_json(value: Any) -> str:
    """Deterministic JSON: sorted keys, no insignificant whitespace, UTF-8 kept as is."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_default
    )


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
