"""Group commit and the column-wise decoder: concurrent batches share commits without sharing
failures, and what comes back is exactly eventsourcing's StoredEvent / Notification."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.persistence import IntegrityError, Notification, StoredEvent

from coder_es.store.lmdb import LMDBApplicationRecorder, LMDBFactory

ROOT = Path(__file__).resolve().parents[2]


def recorder_at(path: Path) -> tuple[LMDBFactory, LMDBApplicationRecorder]:
    factory = LMDBFactory({"LMDB_PATH": str(path)})
    recorder = factory.application_recorder()
    assert isinstance(recorder, LMDBApplicationRecorder)
    return factory, recorder


def state(oid: uuid.UUID, v: int) -> bytes:
    return f"{oid}:{v}".encode()


def test_a_conflicting_batch_fails_alone_while_concurrent_batches_commit(tmp_path: Path) -> None:
    factory, recorder = recorder_at(tmp_path / "s")
    contested = uuid.uuid4()
    recorder.insert_events([StoredEvent(contested, 1, "t.first", b"original")])
    writers = [uuid.uuid4() for _ in range(6)]
    conflicts: list[int] = []
    errors: list[BaseException] = []
    start = threading.Barrier(len(writers) + 1)

    def write(oid: uuid.UUID) -> None:
        start.wait()
        try:
            for first in range(1, 200, 10):
                versions = range(first, first + 10)
                batch = [StoredEvent(oid, v, f"t.{v % 3}", state(oid, v)) for v in versions]
                recorder.insert_events(batch)
        except BaseException as e:
            errors.append(e)

    def conflict() -> None:
        start.wait()
        for i in range(20):
            # Version 2 is new, version 1 is taken: the whole batch must be refused.
            bad = [
                StoredEvent(contested, 2, "t.new", b"lost"),
                StoredEvent(contested, 1, "t.new", b"lost"),
            ]
            try:
                recorder.insert_events(bad)
            except IntegrityError:
                conflicts.append(i)

    threads = [threading.Thread(target=write, args=(oid,)) for oid in writers]
    threads.append(threading.Thread(target=conflict))
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    assert not errors, errors
    assert conflicts == list(range(20))
    assert recorder.select_events(contested) == [StoredEvent(contested, 1, "t.first", b"original")]
    for oid in writers:
        got = recorder.select_events(oid)
        assert [e.originator_version for e in got] == list(range(1, 201))
        assert all(e.state == state(oid, e.originator_version) for e in got)
        assert all(e.topic == f"t.{e.originator_version % 3}" for e in got)
    notifications = recorder.select_notifications(None, 10_000)
    assert [n.id for n in notifications] == list(range(1, 1 + 1 + len(writers) * 200))
    factory.close()


def test_decoded_rows_are_the_library_classes_and_equal_constructed_ones(tmp_path: Path) -> None:
    factory, recorder = recorder_at(tmp_path / "s")
    oid = uuid.uuid4()
    # Versions with gaps, and a str originator id, exercise the general decoding paths.
    written = [StoredEvent(oid, v, f"topic.{v % 2}", bytes([v]) * v) for v in (1, 2, 5, 9, 10)]
    named = [StoredEvent("session-é", v, "topic.0", b"s%d" % v) for v in (3, 4)]
    recorder.insert_events(written)
    recorder.insert_events(named)
    got = recorder.select_events(oid)
    assert got == written
    assert all(type(e) is StoredEvent for e in got)
    assert {hash(e) for e in got} == {hash(e) for e in written}
    assert recorder.select_events(oid, gt=2, lte=9) == written[2:4]
    assert recorder.select_events(oid, desc=True, limit=2) == written[:-3:-1]
    assert recorder.select_events(oid, gt=5, desc=True) == written[:2:-1]
    assert recorder.select_events("session-é") == named
    notifications = recorder.select_notifications(2, 4)
    expected = [*written, *named][1:5]
    assert [type(n) for n in notifications] == [Notification] * 4
    assert notifications == [
        Notification(
            originator_id=e.originator_id,
            originator_version=e.originator_version,
            topic=e.topic,
            state=e.state,
            id=i,
        )
        for i, e in enumerate(expected, start=2)
    ]
    assert [n.id for n in recorder.select_notifications(1, 10, stop=4)] == [1, 2, 3, 4]
    assert [n.id for n in recorder.select_notifications(1, 10, topics=["topic.1"])] == [1, 3, 4]
    factory.close()


def test_topics_first_written_by_another_process_are_read(tmp_path: Path) -> None:
    store = tmp_path / "s"
    factory, recorder = recorder_at(store)
    recorder.insert_events([StoredEvent(uuid.uuid4(), 1, "mine", b"a")])
    assert len(recorder.select_notifications(None, 10)) == 1  # the topic cache is warm
    code = f"""
        import uuid
        from eventsourcing.persistence import StoredEvent
        from coder_es.store.lmdb import LMDBFactory
        r = LMDBFactory({{"LMDB_PATH": {str(store)!r}}}).application_recorder()
        print(r.insert_events([StoredEvent(uuid.UUID(int=7), 1, "theirs", b"b")]))
    """
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert "[2]" in result.stdout, result.stderr
    assert [n.topic for n in recorder.select_notifications(None, 10)] == ["mine", "theirs"]
    assert recorder.select_events(uuid.UUID(int=7))[0].topic == "theirs"
    factory.close()


@pytest.mark.parametrize("bad", [12, "text", None])
def test_state_that_is_not_bytes_is_refused_before_anything_is_written(
    tmp_path: Path, bad: object
) -> None:
    factory, recorder = recorder_at(tmp_path / "s")
    oid = uuid.uuid4()
    from eventsourcing.persistence import DataError

    with pytest.raises(DataError, match="state must be bytes"):
        recorder.insert_events([StoredEvent(oid, 1, "t", b"ok"), StoredEvent(oid, 2, "t", bad)])  # type: ignore[arg-type]
    assert recorder.select_events(oid) == []
    assert recorder.max_notification_id() is None
    factory.close()


def test_batches_of_every_shape_read_back_as_written(tmp_path: Path) -> None:
    """The column-wise append (one originator, consecutive versions) and the event-by-event
    one (anything else) write the same rows: what is read back is what was given."""
    factory, recorder = recorder_at(tmp_path / "s")
    a, b = uuid.uuid4(), uuid.uuid4()
    batches = [
        [StoredEvent(a, v, f"t.{v % 2}", state(a, v)) for v in range(1, 51)],  # one run
        [StoredEvent(a, v, "t.0", state(a, v)) for v in (60, 55, 70)],  # gaps, out of order
        [StoredEvent(b, 1, "t.1", state(b, 1)), StoredEvent(a, 51, "t.1", state(a, 51))],
        [StoredEvent(uuid.UUID(str(b)), 2, "t.2", bytearray(state(b, 2)))],  # type: ignore[arg-type]
        [StoredEvent("named", v, "t.0", memoryview(b"m%d" % v)) for v in (1, 2)],  # type: ignore[arg-type]
        [StoredEvent(b, v, "t.3", b"") for v in range(3, 2**32 + 3, 2**31)],  # big versions
    ]
    for batch in batches:
        recorder.insert_events(batch)
    written = [e for batch in batches for e in batch]
    notifications = recorder.select_notifications(None, 1000)
    assert [n.id for n in notifications] == list(range(1, len(written) + 1))
    assert [(n.originator_id, n.originator_version, n.topic, n.state) for n in notifications] == [
        (e.originator_id, e.originator_version, e.topic, bytes(e.state)) for e in written
    ]
    for oid in (a, b, "named"):
        mine = sorted(
            (e for e in written if e.originator_id == oid), key=lambda e: e.originator_version
        )
        got = recorder.select_events(oid)
        assert [(e.originator_version, e.topic, e.state) for e in got] == [
            (e.originator_version, e.topic, bytes(e.state)) for e in mine
        ]
    # A run that overlaps what is recorded is refused whole, and so is a version out of range.
    with pytest.raises(IntegrityError, match="already recorded"):
        recorder.insert_events([StoredEvent(a, v, "t.0", b"x") for v in range(50, 53)])
    from eventsourcing.persistence import DataError

    with pytest.raises(DataError, match="64-bit"):
        recorder.insert_events([StoredEvent(a, v, "t.0", b"x") for v in (2**63 - 1, 2**63)])
    with pytest.raises(DataError, match="topic must be a str"):
        recorder.insert_events([StoredEvent(a, 100, 7, b"x")])  # type: ignore[arg-type]
    assert len(recorder.select_notifications(None, 1000)) == len(written)
    factory.close()


class _Log:
    """What the Environment did, in order: commits (txn id, last notification id, whether it
    wrote pages and so flushed the file), explicit flushes, and acknowledged appends."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.entries: list[tuple[Any, ...]] = []

    def add(self, *entry: Any) -> None:
        with self.lock:
            self.entries.append(entry)


class _Txn:
    def __init__(self, txn: Any, env: _Env) -> None:
        self._txn = txn
        self._env = env

    def __getattr__(self, name: str) -> Any:
        return getattr(self._txn, name)

    def commit(self) -> None:
        txn_id = self._txn.id()
        cursor = self._txn.cursor(db=self._env.ndb)
        last = int.from_bytes(cursor.key()[:8], "big") if cursor.last() else 0
        self._txn.commit()
        wrote = self._env.env.info()["last_txnid"] >= txn_id
        self._env.log.add("commit", txn_id, last, wrote)


class _Env:
    def __init__(self, env: Any, log: _Log) -> None:
        self.env = env
        self.log = log
        self.ndb: Any = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    def begin(self, write: bool = False, **kwargs: Any) -> Any:
        txn = self.env.begin(write=write, **kwargs)
        return _Txn(txn, self) if write and self.ndb is not None else txn

    def sync(self, force: bool = False) -> None:
        token = object()
        self.log.add("sync start", token)
        self.env.sync(force)
        self.log.add("sync done", token)


def test_a_durable_append_returns_only_after_a_flush_that_followed_its_commit(
    tmp_path: Path,
) -> None:
    """Group commit shares commits and flushes between writer threads; every durable append
    must still return only once a flush began after its commit (an explicit one, or a later
    commit's that wrote pages and so flushed the file), whatever the interleaving."""
    factory, recorder = recorder_at(tmp_path / "s")
    log = _Log()
    store = recorder.store
    proxy = _Env(store.env, log)
    store.env = proxy
    proxy.ndb = recorder._notifications
    writers = [uuid.uuid4() for _ in range(4)]
    errors: list[BaseException] = []
    start = threading.Barrier(len(writers))

    def write(oid: uuid.UUID) -> None:
        start.wait()
        try:
            for first in range(1, 400, 20):
                batch = [StoredEvent(oid, v, "t", state(oid, v)) for v in range(first, first + 20)]
                ids = recorder.insert_events(batch)
                assert ids is not None
                log.add("ack", max(ids))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=write, args=(oid,)) for oid in writers]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=300)
    assert not errors, errors
    store.env = proxy.env
    entries = log.entries
    commits = sorted((e[1], e[2], e[3], i) for i, e in enumerate(entries) if e[0] == "commit")
    acks = [(e[1], i) for i, e in enumerate(entries) if e[0] == "ack"]
    assert len(acks) == 4 * 20
    for nid, acked_at in acks:
        # The commit that wrote this event: the first (by transaction id) whose log reached it.
        txn_id, _, _, committed_at = next(c for c in commits if c[1] >= nid)
        flushed = any(
            entries[i][0] == "sync start"
            and ("sync done", entries[i][1]) in entries[i + 1 : acked_at]
            for i in range(committed_at + 1, acked_at)
        ) or any(t > txn_id and wrote and at < acked_at for t, _, wrote, at in commits)
        assert flushed, (nid, txn_id, entries[committed_at : acked_at + 1])
    factory.close()


def _until(condition: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.001)


def _a_leader_held_in_its_transaction(store: Any) -> tuple[threading.Thread, threading.Event]:
    """A writer thread held inside its (empty) group transaction until the event is set, so the
    batches written meanwhile queue up behind it."""
    held, release = threading.Event(), threading.Event()

    def hold(txn: Any) -> None:
        held.set()
        release.wait(30)

    leader = threading.Thread(
        target=store.write, args=(hold,), kwargs={"durable": True, "group": True}
    )
    leader.start()
    assert held.wait(30)
    return leader, release


def test_a_conflicting_batch_inside_one_group_fails_alone_and_the_rest_share_one_commit(
    tmp_path: Path,
) -> None:
    factory, recorder = recorder_at(tmp_path / "s")
    store = recorder.store
    contested = uuid.uuid4()
    recorder.insert_events([StoredEvent(contested, 1, "t", b"original")])
    # A leader held inside its (empty) transaction, so the next four batches queue up and are
    # committed as one group.
    leader, release = _a_leader_held_in_its_transaction(store)
    txn_before = store.last_txnid()
    good = [uuid.uuid4() for _ in range(3)]
    batches: dict[Any, list[StoredEvent]] = {
        oid: [StoredEvent(oid, v, "t", state(oid, v)) for v in range(1, 6)] for oid in good
    }
    batches["bad"] = [StoredEvent(contested, 2, "t", b"lost"), StoredEvent(contested, 1, "t", b"x")]
    outcomes: dict[Any, Any] = {}

    def write(key: Any) -> None:
        try:
            outcomes[key] = recorder.insert_events(batches[key])
        except Exception as e:
            outcomes[key] = e

    writers = [threading.Thread(target=write, args=(key,)) for key in batches]
    for th in writers:
        th.start()
    _until(lambda: len(store._queue) == 4, "the four batches are queued")
    release.set()
    for th in [leader, *writers]:
        th.join(timeout=60)
    assert isinstance(outcomes["bad"], IntegrityError)
    assert store.last_txnid() == txn_before + 1  # the three good batches: one commit
    ids = sorted(i for oid in good for i in outcomes[oid])
    assert ids == list(range(2, 17))
    for oid in good:
        assert outcomes[oid] == list(range(outcomes[oid][0], outcomes[oid][0] + 5))
        assert recorder.select_events(oid) == batches[oid]
    assert [e.state for e in recorder.select_events(contested)] == [b"original"]
    factory.close()


def test_writer_threads_share_commits_and_every_id_is_given_once_in_order(
    tmp_path: Path,
) -> None:
    """Threads that keep appending are gathered into shared commits (writers do not split into
    cohorts that commit in turn), and however their batches interleave, notification ids are
    1..N, each given once, each batch's contiguous and in its own order."""
    factory, recorder = recorder_at(tmp_path / "s")
    store = recorder.store
    writers = [uuid.uuid4() for _ in range(6)]
    rounds = 25
    returned: dict[uuid.UUID, list[list[int]]] = {oid: [] for oid in writers}
    errors: list[BaseException] = []
    start = threading.Barrier(len(writers))

    def write(k: int, oid: uuid.UUID) -> None:
        start.wait()
        try:
            version = 1
            for r in range(rounds):
                size = 1 + (k + r) % 9
                batch = [
                    StoredEvent(oid, v, "t", state(oid, v)) for v in range(version, version + size)
                ]
                ids = recorder.insert_events(batch)
                assert ids is not None
                returned[oid].append(list(ids))
                version += size
        except BaseException as e:
            errors.append(e)

    txn_before = store.last_txnid()
    threads = [threading.Thread(target=write, args=(k, oid)) for k, oid in enumerate(writers)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    assert not errors, errors
    commits = store.last_txnid() - txn_before
    batches = len(writers) * rounds
    # Measured: ~5.8 batches per commit; ~2.7 when the writers fall into cohorts that commit
    # in turn (a leader that does not wait for the writers just released).
    assert commits <= batches / 4, (commits, batches)
    total = sum(len(ids) for lists in returned.values() for ids in lists)
    every = sorted(i for lists in returned.values() for ids in lists for i in ids)
    assert every == list(range(1, total + 1))
    notifications = recorder.select_notifications(None, total + 10)
    by_id = {n.id: n for n in notifications}
    assert len(notifications) == total
    for oid, lists in returned.items():
        mine = [i for ids in lists for i in ids]
        assert mine == sorted(mine)
        assert all(ids == list(range(ids[0], ids[0] + len(ids))) for ids in lists)
        assert [by_id[i].originator_version for i in mine] == list(range(1, len(mine) + 1))
        assert all(by_id[i].originator_id == oid for i in mine)
        assert [e.originator_version for e in recorder.select_events(oid)] == list(
            range(1, len(mine) + 1)
        )
    factory.close()


class _Interrupted(Exception):
    pass


def test_a_writer_interrupted_while_queued_leaves_no_batch_and_no_stuck_writers(
    tmp_path: Path,
) -> None:
    """A signal (Ctrl-C) in the main thread while its batch waits for another thread's commit:
    the batch is not written behind the caller's back, and the writers queued behind it are not
    left waiting for a leader that is gone."""
    factory, recorder = recorder_at(tmp_path / "s")
    store = recorder.store
    leader, release = _a_leader_held_in_its_transaction(store)
    behind, later = uuid.uuid4(), uuid.uuid4()
    done: list[Any] = []

    def write_behind() -> None:
        # Queued after the main thread's batch: first in line once that one is gone.
        _until(lambda: len(store._queue) == 1, "the main thread's batch is queued")
        done.append(recorder.insert_events([StoredEvent(behind, 1, "t", b"behind")]))

    # Daemons: stuck for good if the test fails.
    queued_behind = threading.Thread(target=write_behind, daemon=True)
    queued_behind.start()

    def interrupt(signum: int, frame: Any) -> None:
        raise _Interrupted

    previous = signal.signal(signal.SIGALRM, interrupt)
    interrupted = uuid.uuid4()
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(_Interrupted):
            recorder.insert_events([StoredEvent(interrupted, 1, "t", b"abandoned")])
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert len(store._queue) == 1  # the batch behind it
    release.set()
    leader.join(timeout=30)
    queued_behind.join(timeout=30)
    writer = threading.Thread(
        target=lambda: done.append(recorder.insert_events([StoredEvent(later, 1, "t", b"ok")])),
        daemon=True,
    )
    writer.start()
    writer.join(timeout=30)
    assert done == [[1], [2]]
    assert recorder.select_events(interrupted) == []
    factory.close()
