"""An eventsourcing persistence module on LMDB: ``PERSISTENCE_MODULE=coder_es.store.lmdb``.

Settings (read through the eventsourcing environment, so ``<APP>_LMDB_PATH`` works too):

    LMDB_PATH           the store directory (required)
    LMDB_DURABILITY     durable (default: every commit is on disk when append returns) or
                        crash_consistent (faster; consistent after a crash, may lose the last
                        commits)
    LMDB_MAP_SIZE       initial map size in bytes (default 64 MiB; doubles whenever it fills up)
    LMDB_MAX_MAP_SIZE   the map never grows past this (default 1 TiB)
    LMDB_POLL_INTERVAL  seconds between checks for other processes' commits (subscriptions)
    LMDB_NAMESPACE      which event log of the directory to use (default: the application's name,
                        so several applications can share one directory without mixing logs)

Layout per namespace NS (named sub-databases of the one Environment, see lmdb_codec for bytes):

    NS:n:<table>   nid + version + topic id + originator key -> state   the application sequence
    NS:x:<table>   originator key + version + topic id + nid -> b""     each aggregate's sequence
    NS:a:<table>   originator key + version + topic id -> state         aggregate recorders
    NS:tracking    upstream application name -> notification id
    coder_es.topics  topic <-> topic id (shared by all namespaces)

An application recorder stores each state once, in NS:n; NS:x is an index whose keys hold every
byte of the notification keys, so reading a session is a keys-only range scan of NS:x plus one
lookup per event in NS:n, in one read transaction.

Writers of one process share commits (group commit, see ``LMDBStore.write``): while one
transaction is being committed and flushed, the batches that arrive queue up and go into the next
transaction together, each still all-or-nothing with its own IntegrityError. Every write function
below therefore checks everything that can fail before its first write.
"""

from __future__ import annotations

import threading
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Collection, Mapping, Sequence
from itertools import islice, repeat
from operator import attrgetter, is_, itemgetter
from operator import lt as _lt
from typing import Any, NamedTuple, TypeVar
from uuid import UUID

import lmdb
from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    DataError,
    InfrastructureFactory,
    IntegrityError,
    ListenNotifySubscription,
    Notification,
    ProcessRecorder,
    StoredEvent,
    Subscription,
    Tracking,
    TrackingRecorder,
)
from eventsourcing.utils import Environment, EnvType, resolve_topic

from coder_es.store.blobs import BlobStore
from coder_es.store.lmdb_codec import (
    INDEX_TAIL,
    RecordDecoder,
    check_topic,
    gc_paused,
    nid_bytes,
    nid_column,
    nid_of,
    notification_keys,
    originator_key,
    range_bounds,
    version_bytes,
)
from coder_es.store.lmdb_env import (
    LMDBSettings,
    LMDBStore,
    LMDBStoreError,
    acquire_store,
    release_store,
)

__all__ = [
    "LMDBAggregateRecorder",
    "LMDBApplicationRecorder",
    "LMDBBlobStore",
    "LMDBFactory",
    "LMDBProcessRecorder",
    "LMDBSubscription",
    "LMDBTrackingRecorder",
]

T = TypeVar("T")
_MAX_NID = b"\xff" * 8
_key = itemgetter(0)
_value = itemgetter(1)


class LMDBRecorder:
    def __init__(self, store: LMDBStore, *, namespace: str = "default", durable: bool = True):
        self.store = store
        self.namespace = namespace
        self.durable = durable
        self._topics = store.topic_table()
        self._decoder = RecordDecoder(self._topics, store.load_topic_names)

    def _db(self, suffix: str) -> Any:
        return self.store.db(f"{self.namespace}:{suffix}".encode())

    def write(self, fn: Callable[[Any], T]) -> T:
        """Run ``fn(txn)`` in one atomic write transaction, with this recorder's durability.

        Materialised views built on ``LMDBTrackingRecorder`` use this to update their own
        sub-databases and the tracking record together.
        """
        return self.store.write(fn, durable=self.durable)

    def _encode(self, stored_events: Sequence[StoredEvent]) -> Batch:
        """The batch's keys, topics and states, checked before any write."""
        return _encode_run(stored_events) or _encode_each(stored_events)

    def _check_new(
        self, txn: Any, db: Any, batch: Batch, stored_events: Sequence[StoredEvent]
    ) -> None:
        """IntegrityError unless no event of ``batch`` is recorded yet (nor repeated in it)."""
        ekeys = batch.ekeys
        if not ekeys:
            return
        cursor = txn.cursor(db=db)
        first = ekeys[0]
        last = ekeys[-1]
        n = len(first)
        # One originator, ascending consecutive versions (the usual batch): one seek tells
        # whether any version in [first, last] is recorded.
        if batch.one_run and not (cursor.set_range(first) and cursor.key()[:n] <= last):
            return
        seen: set[bytes] = set()
        for ekey in ekeys:
            n = len(ekey)
            if ekey in seen or (cursor.set_range(ekey) and cursor.key()[:n] == ekey):
                raise _conflict(self.store.path, ekey, stored_events, ekeys)
            seen.add(ekey)

    @gc_paused
    def _select(
        self,
        db: Any,
        originator_id: UUID | str,
        gt: int | None,
        lte: int | None,
        desc: bool,
        limit: int | None,
    ) -> Sequence[StoredEvent]:
        okey = originator_key(originator_id)
        bounds = range_bounds(okey, gt, lte)
        if bounds is None or limit == 0:
            return []
        with self.store.read() as txn:
            rows = _scan(txn.cursor(db=db), bounds, desc, limit, len(okey), values=True)
        keys = list(map(_key, rows))
        return self._decoder.stored_events(originator_id, keys, map(_value, rows), len(okey))


class LMDBAggregateRecorder(LMDBRecorder, AggregateRecorder):
    """Events of aggregate sequences only (eventsourcing uses it for snapshots)."""

    def __init__(
        self,
        store: LMDBStore,
        *,
        namespace: str = "default",
        durable: bool = True,
        table: str = "events",
    ):
        super().__init__(store, namespace=namespace, durable=durable)
        self.table = table
        self._events = self._db(f"a:{table}")

    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        if not stored_events:
            return None
        encoded = self._encode(stored_events)
        db = self._events
        topics = self._topics

        def put_all(txn: Any) -> dict[str, bytes]:
            self._check_new(txn, db, encoded, stored_events)
            tids = topics.ids_in(txn, set(encoded.topics))
            keys = map(
                _join, zip(encoded.ekeys, map(tids.__getitem__, encoded.topics), strict=True)
            )
            _put_all(txn.cursor(db=db), zip(keys, encoded.states, strict=True), len(encoded.states))
            return tids

        topics.learn(self.store.write(put_all, durable=self.durable, group=True))
        return None

    def select_events(
        self,
        originator_id: UUID | str,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Sequence[StoredEvent]:
        return self._select(self._events, originator_id, gt, lte, desc, limit)


class LMDBApplicationRecorder(LMDBRecorder, ApplicationRecorder):
    """The application sequence (notification log) plus each aggregate's sequence."""

    def __init__(
        self,
        store: LMDBStore,
        *,
        namespace: str = "default",
        durable: bool = True,
        table: str = "events",
    ):
        super().__init__(store, namespace=namespace, durable=durable)
        self.table = table
        self._notifications = self._db(f"n:{table}")
        self._index = self._db(f"x:{table}")

    # -- writing ---------------------------------------------------------------------------

    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        tracking: Tracking | None = kwargs.get("tracking")
        if not stored_events and tracking is None:
            return []
        encoded = self._encode(stored_events)
        ndb = self._notifications
        xdb = self._index
        topics = self._topics

        def append(txn: Any) -> tuple[list[int], dict[str, bytes]]:
            # Everything that can fail is checked first: see the module docstring.
            if tracking is not None:
                self._check_tracking(txn, tracking)
            self._check_new(txn, xdb, encoded, stored_events)
            tids = topics.ids_in(txn, set(encoded.topics))
            if tracking is not None:
                self._write_tracking(txn, tracking)
            cursor = txn.cursor(db=ndb)
            last = nid_of(cursor.key()) if cursor.last() else 0
            n = len(encoded.states)
            ids = range(last + 1, last + 1 + n)
            # Keys are joined and put column by column in C (no Python frame per event).
            nids = list(map(_to_bytes, ids, repeat(8), repeat("big")))
            tidcol = list(map(tids.__getitem__, encoded.topics))
            xkeys = map(_join, zip(encoded.ekeys, tidcol, nids, strict=True))
            _put_all(txn.cursor(db=xdb), zip(xkeys, repeat(b""), strict=False), n)
            nkeys = map(_join, zip(nids, encoded.versions, tidcol, encoded.okeys, strict=True))
            # Notification ids only grow, so these are appends at the B-tree's right edge.
            _put_all(cursor, zip(nkeys, encoded.states, strict=True), n, append=True)
            return list(ids), tids

        ids, tids = self.store.write(append, durable=self.durable, group=True)
        topics.learn(tids)
        return ids

    def _check_tracking(self, txn: Any, tracking: Tracking) -> None:
        msg = f"{type(self).__name__} does not record tracking"
        raise LMDBStoreError(msg)

    def _write_tracking(self, txn: Any, tracking: Tracking) -> None:
        self._check_tracking(txn, tracking)

    # -- reading ---------------------------------------------------------------------------

    def select_events(
        self,
        originator_id: UUID | str,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Sequence[StoredEvent]:
        return self._select_indexed(originator_id, gt, lte, desc, limit)

    @gc_paused
    def _select_indexed(
        self,
        originator_id: UUID | str,
        gt: int | None,
        lte: int | None,
        desc: bool,
        limit: int | None,
    ) -> Sequence[StoredEvent]:
        okey = originator_key(originator_id)
        bounds = range_bounds(okey, gt, lte, INDEX_TAIL)
        if bounds is None or limit == 0:
            return []
        with self.store.read() as txn:
            keys = _scan(txn.cursor(db=self._index), bounds, desc, limit, len(okey), values=False)
            if not keys:
                return []
            cursor = txn.cursor(db=self._notifications)
            states = _states_in_run(cursor, okey, keys)
            if states is None:
                # getmulti looks every key up in C (measured faster than map(cursor.get)) and
                # leaves out keys it does not find, so a short result means a damaged store.
                rows = cursor.getmulti(notification_keys(okey, keys))
                if len(rows) != len(keys):
                    msg = (
                        f"LMDB store {self.store.path} is damaged: {len(keys) - len(rows)} "
                        f"events of {originator_id} are in the session index but not in the "
                        "notification log"
                    )
                    raise DataError(msg)
                states = list(map(_value, rows))
        return self._decoder.stored_events(originator_id, keys, states, len(okey))

    @gc_paused
    def select_notifications(
        self,
        start: int | None,
        limit: int,
        stop: int | None = None,
        topics: Sequence[str] = (),
        *,
        inclusive_of_start: bool = True,
    ) -> Sequence[Notification]:
        first = 1 if start is None else (start if inclusive_of_start else start + 1)
        first = max(first, 1)
        if limit <= 0 or (stop is not None and stop < first):
            return []
        # Keys with nid <= stop sort before the bare nid stop + 1.
        end = None if stop is None or stop >= (1 << 64) - 1 else nid_bytes(stop + 1)
        wanted = frozenset(topics) if topics else None
        decode = self._decoder.notifications
        out: list[Notification] = []
        with self.store.read() as txn:
            cursor = txn.cursor(db=self._notifications)
            if not cursor.set_range(nid_bytes(first)):
                return []
            rows = cursor.iternext()
            while len(out) < limit:
                # Fetch in C; only the last page can reach past ``stop``.
                page = list(islice(rows, limit - len(out)))
                if not page:
                    break
                past = end is not None and page[-1][0] >= end
                if past:
                    page = page[: bisect_left(page, end, key=_key)]
                found = decode(page)
                if wanted is not None:
                    found = [n for n in found if n.topic in wanted]
                out.extend(found)
                if past or wanted is None:
                    break
        return out

    def max_notification_id(self) -> int | None:
        with self.store.read() as txn:
            cursor = txn.cursor(db=self._notifications)
            return nid_of(cursor.key()) if cursor.last() else None

    def subscribe(
        self, gt: int | None = None, topics: Sequence[str] = ()
    ) -> Subscription[ApplicationRecorder]:
        return LMDBSubscription(self, gt=gt, topics=topics)


class LMDBSubscription(ListenNotifySubscription[LMDBApplicationRecorder]):
    """Follows the notification log; woken at once by commits in this process and within
    LMDB_POLL_INTERVAL by commits of other processes sharing the directory."""

    def __init__(
        self,
        recorder: LMDBApplicationRecorder,
        gt: int | None = None,
        topics: Sequence[str] = (),
    ) -> None:
        super().__init__(recorder=recorder, gt=gt, topics=topics)
        recorder.store.listen(self._has_been_notified)
        # A commit between the first pull and listen() would otherwise wait for the next one.
        self._has_been_notified.set()

    def stop(self) -> None:
        super().stop()
        self._recorder.store.unlisten(self._has_been_notified)


class LMDBTrackingRecorder(LMDBRecorder, TrackingRecorder):
    """The position of each upstream application processed (one record per upstream)."""

    def __init__(self, store: LMDBStore, *, namespace: str = "default", durable: bool = True):
        super().__init__(store, namespace=namespace, durable=durable)
        self._tracking = self._db("tracking")

    def insert_tracking(self, tracking: Tracking) -> None:
        self.store.write(
            lambda txn: self._put_tracking(txn, tracking), durable=self.durable, group=True
        )

    def _check_tracking(self, txn: Any, tracking: Tracking) -> None:
        """IntegrityError unless ``tracking`` is past the position recorded in ``txn``."""
        key = tracking.application_name.encode("utf-8")
        current = txn.get(key, db=self._tracking)
        if current is not None and nid_of(current) >= tracking.notification_id:
            msg = (
                f"tracking {tracking.application_name}:{tracking.notification_id} is not after "
                f"the recorded position {nid_of(current)}"
            )
            raise IntegrityError(msg)

    def _put_tracking(self, txn: Any, tracking: Tracking) -> None:
        """Record ``tracking`` in ``txn``; IntegrityError (before any write) unless it is past
        the current position. Materialised views call this inside their own ``write``."""
        self._check_tracking(txn, tracking)
        self._write_tracking(txn, tracking)

    def _write_tracking(self, txn: Any, tracking: Tracking) -> None:
        key = tracking.application_name.encode("utf-8")
        txn.put(key, nid_bytes(tracking.notification_id), db=self._tracking)

    def max_tracking_id(self, application_name: str) -> int | None:
        with self.store.read() as txn:
            current = txn.get(application_name.encode("utf-8"), db=self._tracking)
        return None if current is None else nid_of(current)


class LMDBProcessRecorder(LMDBTrackingRecorder, LMDBApplicationRecorder, ProcessRecorder):
    """Events and the tracking record of the upstream event that caused them, atomically."""

    def __init__(
        self,
        store: LMDBStore,
        *,
        namespace: str = "default",
        durable: bool = True,
        table: str = "events",
    ):
        LMDBApplicationRecorder.__init__(
            self, store, namespace=namespace, durable=durable, table=table
        )
        self._tracking = self._db("tracking")

    def _check_tracking(self, txn: Any, tracking: Tracking) -> None:
        LMDBTrackingRecorder._check_tracking(self, txn, tracking)

    def _write_tracking(self, txn: Any, tracking: Tracking) -> None:
        LMDBTrackingRecorder._write_tracking(self, txn, tracking)


class LMDBFactory(InfrastructureFactory[LMDBTrackingRecorder]):
    LMDB_NAMESPACE = "LMDB_NAMESPACE"
    CREATE_TABLE = "CREATE_TABLE"

    aggregate_recorder_class = LMDBAggregateRecorder
    application_recorder_class = LMDBApplicationRecorder
    tracking_recorder_class = LMDBTrackingRecorder
    process_recorder_class = LMDBProcessRecorder

    def __init__(self, env: Environment | EnvType | None):
        super().__init__(env)
        self.settings = LMDBSettings.from_env(self.env.get)
        self.store = acquire_store(self.settings)
        self._closed = False
        self._close_lock = threading.Lock()

    @property
    def namespace(self) -> str:
        # Read on every use: eventsourcing renames an Environment after constructing it.
        return self.env.get(self.LMDB_NAMESPACE) or self.env.name or "default"

    def _kwargs(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "durable": self.settings.durable}

    def aggregate_recorder(self, purpose: str = "events") -> AggregateRecorder:
        return self.aggregate_recorder_class(self.store, table=purpose, **self._kwargs())

    def application_recorder(self) -> ApplicationRecorder:
        cls = self._topic_or(self.APPLICATION_RECORDER_TOPIC, self.application_recorder_class)
        return cls(self.store, **self._kwargs())

    def tracking_recorder(
        self, tracking_recorder_class: type[LMDBTrackingRecorder] | None = None
    ) -> LMDBTrackingRecorder:
        cls = tracking_recorder_class or self._topic_or(
            self.TRACKING_RECORDER_TOPIC, self.tracking_recorder_class
        )
        if not (isinstance(cls, type) and issubclass(cls, LMDBTrackingRecorder)):
            msg = f"{cls!r} is not an LMDBTrackingRecorder subclass"
            raise LMDBStoreError(msg)
        return cls(self.store, **self._kwargs())

    def process_recorder(self) -> ProcessRecorder:
        cls = self._topic_or(self.PROCESS_RECORDER_TOPIC, self.process_recorder_class)
        return cls(self.store, **self._kwargs())

    def _topic_or(self, key: str, default: type[Any]) -> type[Any]:
        topic = self.env.get(key)
        return resolve_topic(topic) if topic else default

    def close(self) -> None:
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        release_store(self.store)


Factory = LMDBFactory


class LMDBBlobStore(BlobStore):
    """Content-addressed blobs in the store's Environment.

    A record is written once, under the next number of ``coder_es.blobs.records`` (appended:
    its pages fill up), and ``coder_es.blobs.index`` maps its digest to that number. Keyed by
    digest, as stores before kept them in ``coder_es.blobs`` (still read), random keys left the
    B-tree's leaves a third empty: 500 one-line edits of a 100 KB file, ~1,000 small records,
    wasted ~150 KB (issue 36, item 6). The index holds 40-byte entries only.
    """

    DB_NAME = b"coder_es.blobs"
    INDEX_NAME = b"coder_es.blobs.index"
    RECORDS_NAME = b"coder_es.blobs.records"

    def __init__(self, env: Mapping[str, str]) -> None:
        self.settings = LMDBSettings.from_mapping(env)
        self.store = acquire_store(self.settings)
        self._db = self.store.db(self.DB_NAME)
        self._index = self.store.db(self.INDEX_NAME)
        self._records = self.store.db(self.RECORDS_NAME)
        self._closed = False

    def _get(self, txn: Any, key: bytes) -> Any:
        number = txn.get(key, db=self._index)
        if number is not None:
            return txn.get(number, db=self._records)
        return txn.get(key, db=self._db)

    def _read(self, digest: str) -> bytes | None:
        key = _digest_key(digest)
        if key is None:
            return None
        with self.store.read() as txn:
            found: bytes | None = self._get(txn, key)
        return found

    def _put(self, txn: Any, key: bytes, record: bytes) -> None:
        if txn.get(key, db=self._index) is not None or txn.get(key, db=self._db) is not None:
            return
        cursor = txn.cursor(db=self._records)
        number = int.from_bytes(cursor.key(), "big") + 1 if cursor.last() else 1
        txn.put(number.to_bytes(8, "big"), record, append=True, db=self._records)
        txn.put(key, number.to_bytes(8, "big"), overwrite=False, db=self._index)

    def _write_if_absent(self, digest: str, record: bytes) -> None:
        key = _digest_key(digest)
        if key is None:
            msg = f"blob key {digest!r} is not a sha256 hex digest"
            raise LMDBStoreError(msg)
        # Grouped: the blobs of reads running side by side share a commit and its flush
        # (issue 21); the puts are the job's last steps, so it can fail only before writing
        # (a record whose index entry failed to follow would be unreachable, never wrong).
        self.store.write(
            lambda txn: self._put(txn, key, record),
            durable=self.settings.durable,
            group=True,
        )

    def _read_many(self, digests: Collection[str]) -> dict[str, bytes]:
        keys = {d: k for d in digests if (k := _digest_key(d)) is not None}
        with self.store.read() as txn:
            found = {d: self._get(txn, k) for d, k in keys.items()}
        return {d: bytes(r) for d, r in found.items() if r is not None}

    def _write_many(self, records: Mapping[str, bytes]) -> None:
        items = []
        for digest, record in records.items():
            key = _digest_key(digest)
            if key is None:
                msg = f"blob key {digest!r} is not a sha256 hex digest"
                raise LMDBStoreError(msg)
            items.append((key, record))

        def put_all(txn: Any) -> None:
            for key, record in items:
                self._put(txn, key, record)

        self.store.write(put_all, durable=self.settings.durable)

    def _digests(self) -> Any:
        with self.store.read() as txn:
            keys = list(txn.cursor(db=self._db).iternext(values=False))
            keys += txn.cursor(db=self._index).iternext(values=False)
        return (k.hex() for k in sorted(keys))

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            release_store(self.store)


def _digest_key(digest: str) -> bytes | None:
    if len(digest) != 64:
        return None
    try:
        return bytes.fromhex(digest)
    except ValueError:
        return None


def _scan(
    cursor: Any,
    bounds: tuple[bytes, bytes],
    desc: bool,
    limit: int | None,
    klen: int,
    *,
    values: bool,
) -> list[Any]:
    """Rows ``(key, value)`` (or with ``values=False`` bare keys) with low <= key <= high of one
    originator whose key is ``klen`` bytes, in key order (or reversed), at most ``limit``."""
    low, high = bounds
    rows: list[Any] = []
    key = _key if values else None
    # Start at the last key <= high: a descending scan begins there, and its version bounds
    # how many rows an ascending scan can find.
    if cursor.set_range(high):
        if cursor.key() > high and not cursor.prev():
            return rows
    elif not cursor.last():
        return rows
    last_key = cursor.key()
    if last_key < low:
        return rows
    if desc:
        for row in cursor.iterprev(values=values):
            if (row[0] if values else row) < low:
                break
            rows.append(row)
            if limit is not None and len(rows) >= limit:
                break
        return rows
    if not cursor.set_range(low):
        return rows
    # Versions are unique, so [first, last] holds at most last - first + 1 rows: fetch that many
    # in C and cut off whatever lies past ``high`` (only if versions have gaps).
    vslice = slice(klen, klen + 8)
    count = int.from_bytes(last_key[vslice], "big") - int.from_bytes(cursor.key()[vslice], "big")
    count += 1
    if limit is not None:
        count = min(count, limit)
    rows = list(islice(cursor.iternext(values=values), count))
    if rows and (rows[-1][0] if values else rows[-1]) > high:
        rows = rows[: bisect_right(rows, high, key=key)]
    return rows


def _states_in_run(cursor: Any, okey: bytes, index_keys: list[bytes]) -> list[bytes] | None:
    """The states of ``index_keys`` read by one forward range scan of the notification log, when
    their notification ids are consecutive and ascending (a session written without other
    sessions' events in between); None otherwise, or when the log does not hold exactly that run.

    A range scan copies states out of consecutive leaf pages; measured ~2x cheaper than looking
    every key up. Strictly ascending ids spanning exactly n values are the whole run, and a scan
    that starts at the first expected key and ends n rows later at the last one has found every
    id of it, so a missing event still falls back to the lookups that report it.
    """
    n = len(index_keys)
    if n < 2 or not _consecutive_nids(index_keys):
        return None
    first, last = notification_keys(okey, (index_keys[0], index_keys[-1]))
    if not cursor.set_key(first):
        return None
    states = list(islice(cursor.iternext(keys=False, values=True), n))
    if len(states) != n or cursor.key() != last:
        return None
    return states


def _consecutive_nids(index_keys: list[bytes]) -> bool:
    """Whether the notification ids at the end of the index keys are first, first + 1, ...
    in that order. For fixed-width keys (one originator's) this compares 8 columns of bytes,
    each taken every key-width bytes, with those of the expected ids (``nid_column``): no slice
    or int per key (measured ~60 ns a key cheaper than slicing each nid and comparing pairs)."""
    n = len(index_keys)
    first = nid_of(index_keys[0][-8:])
    if nid_of(index_keys[-1][-8:]) - first != n - 1:
        return False
    width = len(index_keys[0])
    joined = b"".join(index_keys)
    if len(joined) != n * width:
        nids = list(map(itemgetter(slice(-8, None)), index_keys))
        return all(map(_lt, nids, islice(nids, 1, None)))
    at = width - 8
    return all(joined[at + j :: width] == nid_column(first, n, j) for j in range(8))


_ID_CLASSES = (UUID, str)
_SIGN = 1 << 63
_join = b"".join
_to_bytes: Callable[[int, int, str], bytes] = int.to_bytes  # type: ignore[assignment]
_states = attrgetter("state")
_topics = attrgetter("topic")
_oids = attrgetter("originator_id")
_versions = attrgetter("originator_version")


class Batch(NamedTuple):
    """A batch of events to append, column by column, every column checked."""

    okeys: list[bytes]
    """Each event's originator key."""
    versions: list[bytes]
    """Each event's version as 8 key bytes."""
    ekeys: list[bytes]
    """originator key + version: what identifies an event."""
    topics: list[str]
    states: list[bytes]
    one_run: bool
    """Versions v, v + 1, ... of one originator, in that order."""


def _encode_run(stored_events: Sequence[StoredEvent]) -> Batch | None:
    """The usual batch, versions v, v + 1, ... of one originator (one object), with str topics
    and bytes states, encoded column-wise in C; None for anything else (``_encode_each``)."""
    n = len(stored_events)
    if not n:
        return None
    oids = list(map(_oids, stored_events))
    oid = oids[0]
    versions = list(map(_versions, stored_events))
    first = versions[0]
    if (
        oid.__class__ not in _ID_CLASSES
        or first.__class__ is not int
        or not all(map(is_, oids, repeat(oid)))
        or {*map(type, versions)} != {int}
        or versions != list(range(first, first + n))
        or not 0 <= first + _SIGN <= first + n - 1 + _SIGN < 1 << 64
    ):
        return None
    states = list(map(_states, stored_events))
    topics = list(map(_topics, stored_events))
    if {*map(type, states)} != {bytes} or {*map(type, topics)} != {str}:
        return None
    for topic in set(topics):
        check_topic(topic)
    okey = originator_key(oid)
    vbytes = list(map(_to_bytes, range(first + _SIGN, first + n + _SIGN), repeat(8), repeat("big")))
    okeys = [okey] * n
    return Batch(
        okeys, vbytes, list(map(_join, zip(okeys, vbytes, strict=True))), topics, states, True
    )


def _encode_each(stored_events: Sequence[StoredEvent]) -> Batch:
    """Any batch, event by event: what ``_encode_run`` does not take, checked one by one."""
    okeys, versions, topics, states = [], [], [], []
    cached: dict[Any, bytes] = {}  # a batch is nearly always one originator and few topics
    checked: set[str] = set()
    for s in stored_events:
        state = s.state
        if state.__class__ is not bytes:
            if not isinstance(state, bytes | bytearray | memoryview):
                msg = f"state must be bytes, not {type(state).__name__}"
                raise DataError(msg)
            state = bytes(state)
        topic = s.topic
        if topic.__class__ is not str or topic not in checked:
            check_topic(topic)
            checked.add(topic)
        oid = s.originator_id
        okey = cached.get(oid) if oid.__class__ in _ID_CLASSES else None
        if okey is None:
            okey = cached[oid] = originator_key(oid)
        okeys.append(okey)
        versions.append(version_bytes(s.originator_version))
        topics.append(topic)
        states.append(state)
    ekeys = list(map(_join, zip(okeys, versions, strict=True)))
    return Batch(okeys, versions, ekeys, topics, states, False)


def _put_all(cursor: Any, rows: Any, n: int, *, append: bool = False) -> None:
    """Put ``n`` new rows through ``cursor`` in one C loop. Every row was checked before, so
    one that is not added means the store is not what was checked: fail the transaction."""
    _, added = cursor.putmulti(rows, append=append)
    if added != n:
        raise lmdb.Error(f"{n - added} of {n} rows were not written")


def _conflict(
    path: str, key: bytes, stored_events: Sequence[StoredEvent], ekeys: list[bytes]
) -> IntegrityError:
    s = stored_events[ekeys.index(key)]
    return IntegrityError(
        f"LMDB store {path}: event {s.originator_version} of {s.originator_id} is already "
        "recorded (another writer appended to this sequence); nothing of this batch was written"
    )
