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

    NS:n:<table>   notification id -> event record       the application sequence
    NS:x:<table>   originator key + version -> notif id  each aggregate's sequence (unique)
    NS:a:<table>   originator key + version -> record    aggregate recorders (snapshots)
    NS:tracking    upstream application name -> notification id
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from itertools import islice
from typing import Any, TypeVar
from uuid import UUID

from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
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
    RecordDecoder,
    encode_record,
    encode_topic_state,
    gc_paused,
    nid_bytes,
    nid_of,
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
    "LMDBSettings",
    "LMDBStoreError",
    "LMDBSubscription",
    "LMDBTrackingRecorder",
]

T = TypeVar("T")
_MAX_NID = b"\xff" * 8


class LMDBRecorder:
    def __init__(self, store: LMDBStore, *, namespace: str = "default", durable: bool = True):
        self.store = store
        self.namespace = namespace
        self.durable = durable
        self._decoder = RecordDecoder()

    def _db(self, suffix: str) -> Any:
        return self.store.db(f"{self.namespace}:{suffix}".encode())

    def write(self, fn: Callable[[Any], T]) -> T:
        """Run ``fn(txn)`` in one atomic write transaction, with this recorder's durability.

        Materialised views built on ``LMDBTrackingRecorder`` use this to update their own
        sub-databases and the tracking record together.
        """
        return self.store.write(fn, durable=self.durable)


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
        items = [
            (
                originator_key(s.originator_id) + version_bytes(s.originator_version),
                encode_topic_state(s.topic, s.state),
            )
            for s in stored_events
        ]
        db = self._events

        def put_all(txn: Any) -> None:
            put = txn.put
            for key, value in items:
                if not put(key, value, overwrite=False, db=db):
                    raise _conflict(self.store.path, key, stored_events, items)

        self.write(put_all)
        return None

    @gc_paused
    def select_events(
        self,
        originator_id: UUID | str,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Sequence[StoredEvent]:
        okey = originator_key(originator_id)
        bounds = range_bounds(okey, gt, lte)
        if bounds is None or limit == 0:
            return []
        with self.store.read() as txn:
            rows = _scan(txn.cursor(db=self._events), bounds, desc, limit)
        return self._decoder.stored_events(originator_id, rows, len(okey))


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
        # Encode outside the write transaction: LMDB lets one writer in at a time.
        encoded = []
        for s in stored_events:
            okey = originator_key(s.originator_id)
            vbytes = version_bytes(s.originator_version)
            encoded.append((okey + vbytes, encode_record(okey, vbytes, s.topic, s.state)))
        ndb = self._notifications
        xdb = self._index

        def append(txn: Any) -> list[int]:
            if tracking is not None:
                self._put_tracking(txn, tracking)
            cursor = txn.cursor(db=ndb)
            last = nid_of(cursor.key()) if cursor.last() else 0
            put = txn.put
            ids = []
            for key, record in encoded:
                last += 1
                nkey = nid_bytes(last)
                if not put(key, nkey, overwrite=False, db=xdb):
                    raise _conflict(self.store.path, key, stored_events, encoded)
                # Notification ids only grow, so this is an append at the B-tree's right edge.
                cursor.put(nkey, record, append=True)
                ids.append(last)
            return ids

        return self.write(append)

    def _put_tracking(self, txn: Any, tracking: Tracking) -> None:
        msg = f"{type(self).__name__} does not record tracking"
        raise LMDBStoreError(msg)

    # -- reading ---------------------------------------------------------------------------

    @gc_paused
    def select_events(
        self,
        originator_id: UUID | str,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Sequence[StoredEvent]:
        okey = originator_key(originator_id)
        bounds = range_bounds(okey, gt, lte)
        if bounds is None or limit == 0:
            return []
        with self.store.read() as txn:
            rows = _scan(txn.cursor(db=self._index), bounds, desc, limit)
            if not rows:
                return []
            found = txn.cursor(db=self._notifications).getmulti([nid for _, nid in rows])
        if len(found) != len(rows):
            msg = (
                f"LMDB store {self.store.path} is damaged: the index of {originator_id} names "
                "notifications that are missing"
            )
            raise LMDBStoreError(msg)
        return self._decoder.records_as_events(originator_id, [rec for _, rec in found])

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
        high = _MAX_NID if stop is None else nid_bytes(stop)
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
                if page[-1][0] > high:
                    page = [row for row in page if row[0] <= high]
                    out.extend(decode(page, wanted))
                    break
                out.extend(decode(page, wanted))
                if wanted is None:
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
        self.write(lambda txn: self._put_tracking(txn, tracking))

    def _put_tracking(self, txn: Any, tracking: Tracking) -> None:
        """Record ``tracking`` in ``txn``; IntegrityError unless it is past the current one."""
        key = tracking.application_name.encode("utf-8")
        current = txn.get(key, db=self._tracking)
        if current is not None and nid_of(current) >= tracking.notification_id:
            msg = (
                f"tracking {tracking.application_name}:{tracking.notification_id} is not after "
                f"the recorded position {nid_of(current)}"
            )
            raise IntegrityError(msg)
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

    def _put_tracking(self, txn: Any, tracking: Tracking) -> None:
        LMDBTrackingRecorder._put_tracking(self, txn, tracking)


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
    """Content-addressed blobs in the ``coder_es.blobs`` sub-database of the store's Environment."""

    DB_NAME = b"coder_es.blobs"

    def __init__(self, env: Mapping[str, str]) -> None:
        self.settings = LMDBSettings.from_mapping(env)
        self.store = acquire_store(self.settings)
        self._db = self.store.db(self.DB_NAME)
        self._closed = False

    def _read(self, digest: str) -> bytes | None:
        key = _digest_key(digest)
        if key is None:
            return None
        with self.store.read() as txn:
            found: bytes | None = txn.get(key, db=self._db)
        return found

    def _write_if_absent(self, digest: str, record: bytes) -> None:
        key = _digest_key(digest)
        if key is None:
            msg = f"blob key {digest!r} is not a sha256 hex digest"
            raise LMDBStoreError(msg)
        db = self._db
        self.store.write(
            lambda txn: txn.put(key, record, overwrite=False, db=db),
            durable=self.settings.durable,
        )

    def _digests(self) -> Any:
        with self.store.read() as txn:
            keys = list(txn.cursor(db=self._db).iternext(values=False))
        return (k.hex() for k in keys)

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
    cursor: Any, bounds: tuple[bytes, bytes], desc: bool, limit: int | None
) -> list[tuple[bytes, bytes]]:
    """Rows with low <= key <= high, in key order (or reversed), at most ``limit``."""
    low, high = bounds
    rows: list[tuple[bytes, bytes]] = []
    if not desc:
        if not cursor.set_range(low):
            return rows
        for row in cursor:
            if row[0] > high:
                break
            rows.append(row)
            if limit is not None and len(rows) >= limit:
                break
        return rows
    # Descending: start at the last key <= high.
    if cursor.set_range(high):
        if cursor.key() > high and not cursor.prev():
            return rows
    elif not cursor.last():
        return rows
    for row in cursor.iterprev():
        if row[0] < low:
            break
        rows.append(row)
        if limit is not None and len(rows) >= limit:
            break
    return rows


def _conflict(
    path: str, key: bytes, stored_events: Sequence[StoredEvent], encoded: Sequence[Any]
) -> IntegrityError:
    keys = [k for k, _ in encoded]
    s = stored_events[keys.index(key)]
    return IntegrityError(
        f"LMDB store {path}: event {s.originator_version} of {s.originator_id} is already "
        "recorded (another writer appended to this sequence); nothing of this batch was written"
    )
