"""Byte layouts of the LMDB event store.

Keys are built so that every read is a forward range scan over adjacent B-tree pages:

    originator key   = b"\\x01" + uuid.bytes                      (UUID ids, 17 bytes)
                     | b"\\x02" + len(2, big-endian) + utf-8 id    (str ids)
    version          = (version + 2**63) as 8 big-endian bytes     (sorts like the integer)
    event key        = originator key + version
    notification key = notification id as 8 big-endian bytes

    event record     = originator key + version + len(topic)(2) + topic + state

The originator key is self-delimiting, so one session's events never interleave with another's
whose id happens to share a prefix. Decoding keeps small caches of originator ids and topics: a
session's events repeat both, and building a UUID or str per row would dominate a scan.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar
from uuid import UUID, SafeUUID

from eventsourcing.persistence import DataError, Notification, StoredEvent

UUID_TAG = 1
STR_TAG = 2
_SIGN = 1 << 63
MAX_STR_ID_BYTES = 400  # LMDB keys are at most 511 bytes; leave room for the version.
_CACHE_LIMIT = 4096

_new = object.__new__
_setattr = object.__setattr__
_from_bytes = int.from_bytes
_UNKNOWN = SafeUUID.unknown


def originator_key(originator_id: UUID | str) -> bytes:
    if isinstance(originator_id, UUID):
        return b"\x01" + originator_id.bytes
    if isinstance(originator_id, str):
        raw = originator_id.encode("utf-8")
        if len(raw) > MAX_STR_ID_BYTES:
            msg = f"originator id is {len(raw)} bytes; the LMDB store allows {MAX_STR_ID_BYTES}"
            raise DataError(msg)
        return b"\x02" + len(raw).to_bytes(2, "big") + raw
    msg = f"originator id must be a UUID or a str, not {type(originator_id).__name__}"
    raise DataError(msg)


def version_bytes(version: int) -> bytes:
    try:
        return (version + _SIGN).to_bytes(8, "big")
    except (OverflowError, TypeError) as e:
        msg = f"originator version {version!r} does not fit a signed 64-bit integer"
        raise DataError(msg) from e


def nid_bytes(notification_id: int) -> bytes:
    return notification_id.to_bytes(8, "big")


def nid_of(key: bytes) -> int:
    return _from_bytes(key, "big")


def encode_record(okey: bytes, vbytes: bytes, topic: str, state: bytes) -> bytes:
    raw_topic = topic.encode("utf-8")
    if len(raw_topic) > 0xFFFF:
        msg = f"topic is {len(raw_topic)} bytes; the LMDB store allows 65535"
        raise DataError(msg)
    return b"".join((okey, vbytes, len(raw_topic).to_bytes(2, "big"), raw_topic, state))


def encode_topic_state(topic: str, state: bytes) -> bytes:
    raw_topic = topic.encode("utf-8")
    if len(raw_topic) > 0xFFFF:
        msg = f"topic is {len(raw_topic)} bytes; the LMDB store allows 65535"
        raise DataError(msg)
    return b"".join((len(raw_topic).to_bytes(2, "big"), raw_topic, state))


F = TypeVar("F", bound=Callable[..., Any])


def gc_paused(fn: F) -> F:
    """Pause the cyclic garbage collector while ``fn`` builds many small objects.

    Decoding 100k rows allocates 200k+ objects, none of them in reference cycles; left running,
    the collector re-scans the growing result list over and over and takes two thirds of the time.
    """

    @wraps(fn)
    def paused(*args: Any, **kwargs: Any) -> Any:
        if not gc.isenabled():
            return fn(*args, **kwargs)
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            gc.enable()

    return paused  # type: ignore[return-value]


class RecordDecoder:
    """Turns stored records back into StoredEvent / Notification objects, fast.

    The eventsourcing dataclasses are frozen; they are built here the way eventsourcing's own
    Mapper builds domain events (``object.__new__`` plus the instance dict), which is a third of
    the cost of calling the dataclass constructor.
    """

    def __init__(self) -> None:
        self._ids: dict[bytes, UUID | str] = {}
        self._topics: dict[bytes, str] = {}

    def originator_id(self, okey: bytes) -> UUID | str:
        found = self._ids.get(okey)
        if found is not None:
            return found
        if len(self._ids) >= _CACHE_LIMIT:
            self._ids.clear()
        value: UUID | str
        if okey[0] == UUID_TAG:
            value = _new(UUID)
            _setattr(value, "int", _from_bytes(okey[1:17], "big"))
            _setattr(value, "is_safe", _UNKNOWN)
        else:
            value = okey[3:].decode("utf-8")
        self._ids[okey] = value
        return value

    def topic(self, raw: bytes) -> str:
        found = self._topics.get(raw)
        if found is None:
            if len(self._topics) >= _CACHE_LIMIT:
                self._topics.clear()
            found = self._topics[raw] = raw.decode("utf-8")
        return found

    @gc_paused
    def notifications(
        self, rows: list[tuple[bytes, bytes]], topics: frozenset[str] | None = None
    ) -> list[Notification]:
        """Decode ``(notification key, record)`` rows, keeping only ``topics`` if given."""
        out: list[Notification] = []
        append = out.append
        ids_get = self._ids.get
        topics_get = self._topics.get
        for key, rec in rows:
            p = 17 if rec[0] == UUID_TAG else 3 + ((rec[1] << 8) | rec[2])
            okb = rec[:p]
            oid = ids_get(okb)
            if oid is None:
                oid = self.originator_id(okb)
            tl = (rec[p + 8] << 8) | rec[p + 9]
            end = p + 10 + tl
            rawt = rec[p + 10 : end]
            topic = topics_get(rawt)
            if topic is None:
                topic = self.topic(rawt)
            if topics is not None and topic not in topics:
                continue
            n = _new(Notification)
            _setattr(
                n,
                "__dict__",
                {
                    "originator_id": oid,
                    "originator_version": _from_bytes(rec[p : p + 8], "big") - _SIGN,
                    "topic": topic,
                    "state": rec[end:],
                    "id": _from_bytes(key, "big"),
                },
            )
            append(n)
        return out

    @gc_paused
    def stored_events(
        self, oid: UUID | str, rows: list[tuple[bytes, bytes]], klen: int
    ) -> list[StoredEvent]:
        """Decode ``(event key, topic+state)`` rows of one originator (aggregate recorders)."""
        out: list[StoredEvent] = []
        append = out.append
        topics_get = self._topics.get
        for key, val in rows:
            tl = (val[0] << 8) | val[1]
            rawt = val[2 : 2 + tl]
            topic = topics_get(rawt)
            if topic is None:
                topic = self.topic(rawt)
            e = _new(StoredEvent)
            _setattr(
                e,
                "__dict__",
                {
                    "originator_id": oid,
                    "originator_version": _from_bytes(key[klen:], "big") - _SIGN,
                    "topic": topic,
                    "state": val[2 + tl :],
                },
            )
            append(e)
        return out

    @gc_paused
    def records_as_events(self, oid: UUID | str, records: list[bytes]) -> list[StoredEvent]:
        """Decode full event records (application recorders) of one originator."""
        out: list[StoredEvent] = []
        append = out.append
        topics_get = self._topics.get
        for rec in records:
            p = 17 if rec[0] == UUID_TAG else 3 + ((rec[1] << 8) | rec[2])
            tl = (rec[p + 8] << 8) | rec[p + 9]
            end = p + 10 + tl
            rawt = rec[p + 10 : end]
            topic = topics_get(rawt)
            if topic is None:
                topic = self.topic(rawt)
            e = _new(StoredEvent)
            _setattr(
                e,
                "__dict__",
                {
                    "originator_id": oid,
                    "originator_version": _from_bytes(rec[p : p + 8], "big") - _SIGN,
                    "topic": topic,
                    "state": rec[end:],
                },
            )
            append(e)
        return out


def range_bounds(okey: bytes, gt: int | None, lte: int | None) -> tuple[bytes, bytes] | None:
    """Inclusive [low, high] event keys for ``gt < version <= lte``, or None when empty."""
    if gt is not None and (gt + _SIGN >= (1 << 64) - 1 or (lte is not None and lte <= gt)):
        return None
    low = okey + (b"\x00" * 8 if gt is None else version_bytes(gt + 1))
    high = okey + (b"\xff" * 8 if lte is None else version_bytes(lte))
    return low, high
