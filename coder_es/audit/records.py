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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.persistence import Mapper, StoredEvent

from coder_es.domain.chain import _default as _chain_default
from coder_es.errors import StoreError
from coder_es.store.surrogates import escape_surrogates

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


# ``canonical_json`` with its encoder built once (json.dumps builds one per call): the hot loop.
_encode = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_chain_default
).encode
_sha256 = hashlib.sha256
# json.loads on bytes sniffs the encoding and builds a decoder per call; states are UTF-8.
_decode_json = json.JSONDecoder().decode


def decode_utf8_json(raw: bytes) -> Any:
    return _decode_json(raw.decode("utf-8"))


def compute_hash(session: str, version: int, topic: str, timestamp: str, fields: Any) -> str:
    """Same bytes as ``coder_es.domain.chain.event_hash``, from already-plain values."""
    body = {
        "session": session,
        "version": version,
        "topic": topic,
        "timestamp": timestamp,
        "fields": fields,
    }
    return _sha256(escape_surrogates(_encode(body)).encode()).hexdigest()


class EventDecoder:
    """Turns stored events into ``AuditEvent``s through an application's mapper."""

    def __init__(
        self, mapper: Mapper[Any], decode_json: Callable[[bytes], Any] = decode_utf8_json
    ) -> None:
        """``decode_json`` turns a state's bytes into the values ``json.loads`` gives (a faster
        decoder may be given; it must fall back to ``json`` where it differs)."""
        self._mapper = mapper
        self._decode = decode_json
        self._plain_bytes = not (mapper.cipher or mapper.compressor)
        self._last_id: Any = None
        self._last_str = ""

    def session_str(self, originator_id: Any) -> str:
        # Events of one session come in runs: format its id once per run.
        if originator_id is not self._last_id:
            self._last_id = originator_id
            self._last_str = str(originator_id)
        return self._last_str

    def plain_state(self, stored: StoredEvent) -> bytes:
        state = stored.state
        if self._mapper.cipher:
            state = self._mapper.cipher.decrypt(state)
        if self._mapper.compressor:
            state = self._mapper.compressor.decompress(state)
        return state

    def state(self, stored: StoredEvent) -> tuple[dict[str, Any], str]:
        """(fields with ``class_version``, ISO timestamp) of a stored event, as recorded."""
        raw = stored.state if self._plain_bytes else self.plain_state(stored)
        if raw.count(_TYPE_KEY) == 1:
            state = self._decode(raw)
            stamp = state.pop("timestamp", None)
            if isinstance(stamp, dict) and stamp.get("_type_") == "datetime_iso":
                return state, str(stamp["_data_"])
        state = dict(self._mapper.transcoder.decode(raw))
        stamp = state.pop("timestamp")
        return _plain(state), stamp.isoformat() if isinstance(stamp, datetime) else str(stamp)

    def link(self, stored: StoredEvent) -> tuple[str, str | None]:
        """(chain hash, prev_hash) of a stored event: all a chain walk needs, without building
        an ``AuditEvent`` (which only the diagnosis of a broken link needs)."""
        fields, stamp = self.state(stored)
        fields.pop("class_version", None)
        prev = fields.get("prev_hash")
        body = {
            "session": self.session_str(stored.originator_id),
            "version": stored.originator_version,
            "topic": stored.topic,
            "timestamp": stamp,
            "fields": fields,
        }
        digest = _sha256(escape_surrogates(_encode(body)).encode()).hexdigest()
        return digest, prev if isinstance(prev, str) else None

    def decode(self, stored: StoredEvent) -> AuditEvent:
        fields, stamp = self.state(stored)
        class_version = fields.pop("class_version", None)
        session = self.session_str(stored.originator_id)
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


@dataclass(frozen=True)
class Undecodable:
    """A stored event that cannot be decoded (damaged bytes, a renamed field, a wrong type)."""

    session: str
    version: int | None
    """None when the version itself cannot be read."""
    reason: str


def undecodable_reason(e: BaseException) -> str:
    """What is wrong with a stored event, from the error its decoding raised."""
    if isinstance(e, UnicodeDecodeError):
        return f"its state is not UTF-8 text ({e.reason} at byte {e.start})"
    if isinstance(e, json.JSONDecodeError):
        return f"its state is not valid JSON ({e.msg} at character {e.pos})"
    if isinstance(e, KeyError):
        return f"its state has no field {e.args[0]!r}"
    if isinstance(e, AttributeError | TypeError):
        return str(e) if "column holds" in str(e) else f"a stored value has the wrong type ({e})"
    return f"{type(e).__name__}: {e}"[:300]


def iter_session_records(
    app: Any, session_id: UUID, *, batch: int = 5000
) -> Iterator[AuditEvent | Undecodable]:
    """Every recorded event of a session in version order, paged so memory stays flat; an event
    that cannot be decoded comes as ``Undecodable`` (verify reports it and goes on)."""
    decoder = EventDecoder(app.mapper)
    gt: int | None = None
    session = str(session_id)
    while True:
        page = app.recorder.select_events(session_id, gt=gt, limit=batch)
        for stored in page:
            version = stored.originator_version
            if not isinstance(version, int):
                why = f"an event's version column holds {version!r}, not a number"
                yield Undecodable(session, None, why)
                continue
            if not isinstance(stored.state, bytes):
                why = f"the state column holds {type(stored.state).__name__}, not bytes"
                yield Undecodable(session, version, why)
                continue
            try:
                yield decoder.decode(stored)
            except Exception as e:  # any damage at all: name the event, never a traceback
                yield Undecodable(session, version, undecodable_reason(e))
        if len(page) < batch:
            return
        gt = max(e.originator_version for e in page if isinstance(e.originator_version, int))


def iter_session_events(app: Any, session_id: UUID, *, batch: int = 5000) -> Iterator[AuditEvent]:
    """Every recorded event of a session in version order; a damaged one raises ``StoreError``
    naming it (``coder-es verify`` lists every damaged event)."""
    for record in iter_session_records(app, session_id, batch=batch):
        if isinstance(record, Undecodable):
            msg = (
                f"session {record.session} version {record.version or '?'}: {record.reason}; "
                "run coder-es verify --all for every damaged event"
            )
            raise StoreError(msg)
        yield record


def load_session_events(app: Any, session_id: UUID) -> list[AuditEvent]:
    return list(iter_session_events(app, session_id))
