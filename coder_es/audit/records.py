"""Events as the audit trail sees them: exactly as recorded, with their chain hash.

The audit trail never upcasts: an event is exported and verified in the form it was recorded in,
because that is the form its chain hash covers. ``AuditEvent`` is that form: plain JSON fields, the
ISO timestamp string and the hash recomputed from them (``coder_es.domain.chain.event_hash``).

Decoding is the hot path of ``verify`` (a million events must check in seconds), so the common case
skips eventsourcing's object hook: when the only transcoded value in a state is the timestamp (the
Session's fields are JSON-native), a plain ``json.loads`` gives the same values. Anything else goes
through the application's transcoder.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.persistence import Mapper, StoredEvent

from coder_es.domain.chain import canonical_json

_TYPE_KEY = b'"_type_"'
# Fields of a recorded state that are not event content: the chain hash leaves them out.
_NOT_HASHED = ("timestamp", "class_version")


@dataclass(frozen=True)
class AuditEvent:
    session: str
    version: int
    topic: str
    timestamp: str
    fields: dict[str, Any]
    """The event's content as recorded, ``prev_hash`` included."""
    chain_hash: str
    """The hash recomputed from this content (what the next event should link to)."""
    class_version: int | None = None
    redacted: tuple[str, ...] = ()
    """Fields replaced at export (``fields`` then no longer hash to ``chain_hash``)."""

    @property
    def kind(self) -> str:
        """``UserMessageAdded``, ``ToolCallCompleted``...: the event class name."""
        return self.topic.rsplit(".", 1)[-1].rsplit(":", 1)[-1]

    @property
    def prev_hash(self) -> str | None:
        value = self.fields.get("prev_hash")
        return value if isinstance(value, str) else None

    @property
    def time(self) -> datetime:
        return datetime.fromisoformat(self.timestamp)

    def record(self) -> dict[str, Any]:
        """The JSON record of this event (the JSONL export writes it with ``canonical_json``)."""
        out: dict[str, Any] = {
            "session": self.session,
            "version": self.version,
            "topic": self.topic,
            "kind": self.kind,
            "timestamp": self.timestamp,
            "fields": self.fields,
            "hash": self.chain_hash,
        }
        if self.class_version is not None:
            out["class_version"] = self.class_version
        if self.redacted:
            out["redacted"] = list(self.redacted)
        return out


def compute_hash(session: str, version: int, topic: str, timestamp: str, fields: Any) -> str:
    """Same bytes as ``coder_es.domain.chain.event_hash``, from already-plain values."""
    body = {
        "session": session,
        "version": version,
        "topic": topic,
        "timestamp": timestamp,
        "fields": fields,
    }
    return hashlib.sha256(canonical_json(body).encode()).hexdigest()


class EventDecoder:
    """Turns stored events into ``AuditEvent``s through an application's mapper."""

    def __init__(self, mapper: Mapper[Any]) -> None:
        self._mapper = mapper

    def plain_state(self, stored: StoredEvent) -> bytes:
        state = stored.state
        if self._mapper.cipher:
            state = self._mapper.cipher.decrypt(state)
        if self._mapper.compressor:
            state = self._mapper.compressor.decompress(state)
        return state

    def state(self, stored: StoredEvent) -> tuple[dict[str, Any], str]:
        """(fields with ``class_version``, ISO timestamp) of a stored event, as recorded."""
        raw = self.plain_state(stored)
        if raw.count(_TYPE_KEY) == 1:
            state = json.loads(raw)
            stamp = state.pop("timestamp", None)
            if isinstance(stamp, dict) and stamp.get("_type_") == "datetime_iso":
                return state, str(stamp["_data_"])
        state = dict(self._mapper.transcoder.decode(raw))
        stamp = state.pop("timestamp")
        return _plain(state), stamp.isoformat() if isinstance(stamp, datetime) else str(stamp)

    def decode(self, stored: StoredEvent) -> AuditEvent:
        fields, stamp = self.state(stored)
        class_version = fields.pop("class_version", None)
        session = str(stored.originator_id)
        return AuditEvent(
            session=session,
            version=stored.originator_version,
            topic=stored.topic,
            timestamp=stamp,
            fields=fields,
            chain_hash=compute_hash(
                session, stored.originator_version, stored.topic, stamp, fields
            ),
            class_version=class_version,
        )


def _plain(value: Any) -> Any:
    """JSON-native copy of a transcoded value (UUIDs and datetimes as the chain hashes them)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def iter_session_events(
    app: Any, session_id: UUID, *, batch: int = 5000
) -> Iterator[AuditEvent]:
    """Every recorded event of a session in version order, paged so memory stays flat."""
    decoder = EventDecoder(app.mapper)
    gt: int | None = None
    while True:
        page = app.recorder.select_events(session_id, gt=gt, limit=batch)
        for stored in page:
            yield decoder.decode(stored)
        if len(page) < batch:
            return
        gt = page[-1].originator_version


def load_session_events(app: Any, session_id: UUID) -> list[AuditEvent]:
    return list(iter_session_events(app, session_id))
