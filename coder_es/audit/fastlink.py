"""The chain link of a stored event, computed fast and byte-for-byte as ``EventDecoder.link`` does.

``verify --all`` spends most of its time turning each stored state into the canonical JSON its
chain hash covers (``coder_es.domain.chain.canonical_json``: sorted keys, compact separators, UTF-8
kept as is). The standard library does that in two slow steps (``json`` decode, then a sorted
re-encode). msgspec does both several times faster, and for the values it is used on here its bytes
are the standard library's exactly:

- strings: both escape only ``"``, ``\\`` and the control characters below U+0020, with the same
  short forms (``\\n``, ``\\t``...) and lowercase ``\\u00XX`` for the rest;
- integers of any size, ``true``/``false``/``null``, arrays, objects (keys sorted by code point:
  UTF-8 byte order is code point order; a repeated key keeps its last value in both);
- floats are NOT the same (msgspec writes ``1e16`` where ``repr`` gives ``1e+16``), and msgspec
  rejects ``NaN``/``Infinity`` and lone surrogates, which the standard library accepts.

So msgspec is used only when it cannot differ: any float, any parse error, any transcoded value
other than the timestamp sends the event down the standard path (``EventDecoder.link``), which stays
the reference. ``tests/audit/test_audit_verify_fast.py`` checks the equivalence with hypothesis.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import msgspec
from eventsourcing.persistence import Mapper, StoredEvent

from coder_es.audit.records import AuditEvent, EventDecoder

_TYPE_KEY = b'"_type_"'
_sha256 = hashlib.sha256


class _FloatSeen(Exception):
    """Raised from msgspec's float hook: floats are encoded differently, take the standard path."""


def _no_floats(text: str) -> Any:
    raise _FloatSeen(text)


_decode = msgspec.json.Decoder(float_hook=_no_floats).decode
_encode = msgspec.json.Encoder(order="sorted").encode
# What msgspec raises for input it will not take; the float hook's error comes out wrapped in a
# ValidationError (a MsgspecError).
_NOT_FAST = (msgspec.MsgspecError, _FloatSeen, ValueError, UnicodeError)


class FastLinker:
    """``link(stored) -> (chain hash, prev_hash)``, equal to ``EventDecoder(mapper).link``."""

    def __init__(self, mapper: Mapper[Any]) -> None:
        self.decoder = EventDecoder(mapper)
        self._plain_bytes = not (mapper.cipher or mapper.compressor)
        self._sessions: dict[Any, bytes] = {}
        self._topics: dict[str, bytes] = {}
        self.fallbacks = 0
        """Events that took the standard path (floats, odd encodings): for benchmarks and tests."""

    def session_json(self, originator_id: Any) -> bytes:
        found = self._sessions.get(originator_id)
        if found is None:
            if len(self._sessions) > 4096:
                self._sessions.clear()
            found = self._sessions[originator_id] = _encode(str(originator_id))
        return found

    def _state(self, stored: StoredEvent) -> tuple[dict[str, Any], Any, str] | None:
        """(fields, class_version, ISO timestamp) as ``EventDecoder.state`` reads them, or None
        when only the standard path can be trusted to read this state the same way."""
        raw = stored.state if self._plain_bytes else self.decoder.plain_state(stored)
        # One transcoded value means only the timestamp is one (the standard path's own test).
        if raw.count(_TYPE_KEY) != 1:
            return None
        try:
            state = _decode(raw)
        except _NOT_FAST:
            return None
        if type(state) is not dict:
            return None
        stamp = state.pop("timestamp", None)
        if not (isinstance(stamp, dict) and stamp.get("_type_") == "datetime_iso"):
            return None
        return state, state.pop("class_version", None), str(stamp["_data_"])

    def _hash(self, stored: StoredEvent, fields: dict[str, Any], stamp: str) -> str:
        topic = self._topics.get(stored.topic)
        if topic is None:
            topic = self._topics[stored.topic] = _encode(stored.topic)
        # The body canonical_json would write: its keys in sorted order, values encoded alone.
        body = b"".join(
            (
                b'{"fields":',
                _encode(fields),
                b',"session":',
                self.session_json(stored.originator_id),
                b',"timestamp":',
                _encode(stamp),
                b',"topic":',
                topic,
                b',"version":',
                _encode(stored.originator_version),
                b"}",
            )
        )
        return _sha256(body).hexdigest()

    def links(self, batch: Sequence[StoredEvent]) -> list[tuple[str, str | None]]:
        """``[self.link(e) for e in batch]``, inlined: this loop is most of ``verify --all``."""
        out: list[tuple[str, str | None]] = []
        append = out.append
        plain = self._plain_bytes
        topics = self._topics
        session_json = self.session_json
        last_id: Any = None
        session = b""
        for stored in batch:
            raw = stored.state if plain else self.decoder.plain_state(stored)
            if raw.count(_TYPE_KEY) != 1:
                append(self._slow(stored))
                continue
            try:
                state = _decode(raw)
            except _NOT_FAST:
                append(self._slow(stored))
                continue
            if type(state) is not dict:
                append(self._slow(stored))
                continue
            stamp = state.pop("timestamp", None)
            if not (type(stamp) is dict and stamp.get("_type_") == "datetime_iso"):
                append(self._slow(stored))
                continue
            state.pop("class_version", None)
            topic = topics.get(stored.topic)
            if topic is None:
                topic = topics[stored.topic] = _encode(stored.topic)
            if stored.originator_id is not last_id:
                last_id = stored.originator_id
                session = session_json(last_id)
            body = b"".join(
                (
                    b'{"fields":',
                    _encode(state),
                    b',"session":',
                    session,
                    b',"timestamp":',
                    _encode(str(stamp["_data_"])),
                    b',"topic":',
                    topic,
                    b',"version":',
                    _encode(stored.originator_version),
                    b"}",
                )
            )
            prev = state.get("prev_hash")
            append((_sha256(body).hexdigest(), prev if type(prev) is str else None))
        return out

    def _slow(self, stored: StoredEvent) -> tuple[str, str | None]:
        self.fallbacks += 1
        return self.decoder.link(stored)

    def link(self, stored: StoredEvent) -> tuple[str, str | None]:
        """(chain hash, prev_hash): what a chain walk needs."""
        found = self._state(stored)
        if found is None:
            self.fallbacks += 1
            return self.decoder.link(stored)
        fields, _, stamp = found
        prev = fields.get("prev_hash")
        return self._hash(stored, fields, stamp), prev if isinstance(prev, str) else None

    def decode(self, stored: StoredEvent) -> AuditEvent:
        """The ``AuditEvent``, equal to ``EventDecoder.decode``'s (for blob references)."""
        found = self._state(stored)
        if found is None:
            self.fallbacks += 1
            return self.decoder.decode(stored)
        fields, class_version, stamp = found
        return AuditEvent(
            session=self.decoder.session_str(stored.originator_id),
            version=stored.originator_version,
            topic=stored.topic,
            timestamp=stamp,
            fields=fields,
            chain_hash=self._hash(stored, fields, stamp),
            class_version=class_version,
        )
