"""Bad input for the LMDB store: each case gives a clear error naming the store, loses nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import uuid
from pathlib import Path

import lmdb
import pytest
from eventsourcing.application import Application
from eventsourcing.domain import Aggregate
from eventsourcing.persistence import InfrastructureFactory, IntegrityError, StoredEvent
from eventsourcing.utils import Environment

from coder_es.errors import StoreError
from coder_es.store.lmdb import LMDBBlobStore, LMDBFactory
from coder_es.store.lmdb_env import open_stores

ROOT = Path(__file__).resolve().parents[2]


def lmdb_env(path: Path, **extra: str) -> dict[str, str]:
    return {"PERSISTENCE_MODULE": "coder_es.store.lmdb", "LMDB_PATH": str(path), **extra}


def open_factory(path: Path, **extra: str) -> LMDBFactory:
    factory = InfrastructureFactory.construct(Environment(env=lmdb_env(path, **extra)))
    assert isinstance(factory, LMDBFactory)
    return factory


def batch(oid: uuid.UUID, first: int, n: int, size: int = 100) -> list[StoredEvent]:
    return [
        StoredEvent(oid, v, "t", f"{oid}:{v}:".encode() + b"x" * size)
        for v in range(first, first + n)
    ]


def run_python(code: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(  # type: ignore[call-overload]
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        **kwargs,
    )


def test_corrupted_store_names_the_directory(tmp_path: Path) -> None:
    store = tmp_path / "store"
    factory = open_factory(store)
    factory.application_recorder().insert_events(batch(uuid.uuid4(), 1, 3))
    factory.close()
    data = store / "data.mdb"
    with data.open("r+b") as f:
        f.write(os.urandom(2 * 4096))
    with pytest.raises(StoreError, match=str(store)) as caught:
        open_factory(store)
    assert "damaged" in str(caught.value) or "not an LMDB" in str(caught.value)
    assert str(store.resolve()) not in open_stores()


def test_foreign_lmdb_environment_is_refused_and_left_untouched(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign"
    env = lmdb.open(str(foreign))
    with env.begin(write=True) as txn:
        txn.put(b"their-key", b"their-value")
    env.close()
    with pytest.raises(StoreError, match="another program"):
        open_factory(foreign)
    env = lmdb.open(str(foreign))
    with env.begin() as txn:
        assert list(txn.cursor()) == [(b"their-key", b"their-value")]
    env.close()


def test_directory_of_other_files_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(StoreError, match="holds other files"):
        open_factory(tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["notes.txt"]


def test_path_that_is_a_file_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(StoreError, match="is a file"):
        open_factory(f)


def test_bad_settings_are_named(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="LMDB_DURABILITY"):
        open_factory(tmp_path / "s", LMDB_DURABILITY="sometimes")
    with pytest.raises(StoreError, match="LMDB_MAP_SIZE"):
        open_factory(tmp_path / "s", LMDB_MAP_SIZE="lots")
    with pytest.raises(StoreError, match="LMDB_PATH"):
        InfrastructureFactory.construct(
            Environment(env={"PERSISTENCE_MODULE": "coder_es.store.lmdb"})
        )


@pytest.mark.skipif(os.geteuid() != 0, reason="drops privileges to user nobody")
def test_unreadable_directory_gives_store_error(tmp_path: Path) -> None:
    store = tmp_path / "store"
    open_factory(store).close()
    os.chmod(tmp_path, 0o755)
    os.chmod(store, 0o700)  # root's; user nobody may not enter
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: become nobody and try to open the store
        try:
            os.setuid(65534)
            try:
                LMDBFactory({"LMDB_PATH": str(store)})
                message = "opened"
            except StoreError as e:
                message = f"StoreError: {e}"
            os.write(write_end, message.encode())
        finally:
            os._exit(0)
    os.close(write_end)
    os.waitpid(pid, 0)
    with os.fdopen(read_end) as f:
        message = f.read()
    assert message.startswith("StoreError:"), message
    assert str(store) in message
    assert "ermission denied" in message


def test_map_grows_instead_of_failing(tmp_path: Path) -> None:
    factory = open_factory(tmp_path / "s", LMDB_MAP_SIZE=str(256 * 1024))
    recorder = factory.application_recorder()
    oid = uuid.uuid4()
    for i in range(40):
        recorder.insert_events(batch(oid, 1 + i * 25, 25, size=2000))
    assert len(recorder.select_events(oid)) == 1000
    assert factory.store.env.info()["map_size"] > 256 * 1024
    factory.close()


def test_full_map_fails_cleanly_and_keeps_what_was_committed(tmp_path: Path) -> None:
    factory = open_factory(
        tmp_path / "s", LMDB_MAP_SIZE=str(256 * 1024), LMDB_MAX_MAP_SIZE=str(512 * 1024)
    )
    recorder = factory.application_recorder()
    oid = uuid.uuid4()
    committed = 0
    with pytest.raises(StoreError, match="is full") as caught:
        for i in range(1000):
            recorder.insert_events(batch(oid, 1 + i * 10, 10, size=1000))
            committed += 10
    assert str(tmp_path / "s") in str(caught.value)
    events = recorder.select_events(oid)
    assert len(events) == committed > 0
    assert recorder.max_notification_id() == committed
    assert all(e.state.startswith(f"{oid}:{e.originator_version}:".encode()) for e in events)
    factory.close()


def test_write_failure_from_full_disk_loses_no_committed_event(tmp_path: Path) -> None:
    store = tmp_path / "s"
    # RLIMIT_FSIZE makes the kernel refuse to grow data.mdb, as a full disk would.
    result = run_python(
        f"""
        import resource, signal, uuid
        from eventsourcing.persistence import StoredEvent
        from coder_es.errors import StoreError
        from coder_es.store.lmdb import LMDBFactory
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        f = LMDBFactory({{"LMDB_PATH": {str(store)!r}}})
        r = f.application_recorder()
        oid = uuid.UUID(int=7)
        r.insert_events([StoredEvent(oid, 1, "t", b"first")])
        resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
        try:
            for i in range(1000):
                r.insert_events([StoredEvent(oid, 2 + i, "t", b"y" * 4000)])
                print("committed", 2 + i, flush=True)
        except StoreError as e:
            print("StoreError:", e)
        """
    )
    assert "StoreError:" in result.stdout, result.stdout + result.stderr
    assert str(store) in result.stdout
    committed = [
        int(line.split()[1]) for line in result.stdout.splitlines() if line.startswith("committed")
    ]
    factory = open_factory(store)
    events = factory.application_recorder().select_events(uuid.UUID(int=7))
    assert [e.originator_version for e in events] == [1, *committed]
    assert events[0].state == b"first"
    factory.close()


def test_second_writer_on_a_session_gets_integrity_error_and_writes_nothing(tmp_path: Path) -> None:
    store = tmp_path / "s"
    app1: Application[uuid.UUID] = Application(env=lmdb_env(store))
    session = Aggregate()
    app1.save(session)
    # A second process loads the same session and appends first.
    result = run_python(
        f"""
        import uuid
        from eventsourcing.application import Application
        from eventsourcing.domain import Aggregate
        app = Application(env={lmdb_env(store)!r})
        s = app.repository.get(uuid.UUID({str(session.id)!r}))
        s.trigger_event(Aggregate.Event)
        app.save(s)
        print("appended", s.version)
        """
    )
    assert "appended 2" in result.stdout, result.stderr
    session.trigger_event(Aggregate.Event)
    session.trigger_event(Aggregate.Event)
    with pytest.raises(IntegrityError, match="already recorded"):
        app1.save(session)
    events = list(app1.events.get(session.id))
    assert [e.originator_version for e in events] == [1, 2]
    assert app1.recorder.max_notification_id() == 2
    app1.close()


def test_subscription_sees_commits_of_another_process(tmp_path: Path) -> None:
    store = tmp_path / "s"
    factory = open_factory(store, LMDB_POLL_INTERVAL="0.02")
    recorder = factory.application_recorder()
    got: list[int] = []
    with recorder.subscribe(gt=None) as subscription:
        result = run_python(
            f"""
            import uuid
            from eventsourcing.persistence import StoredEvent
            from coder_es.store.lmdb import LMDBFactory
            f = LMDBFactory({{"LMDB_PATH": {str(store)!r}}})
            print(f.application_recorder().insert_events(
                [StoredEvent(uuid.uuid4(), v, "t", b"s") for v in (1, 2, 3)]))
            """
        )
        assert "[1, 2, 3]" in result.stdout, result.stderr
        timer = threading.Timer(10, subscription.stop)
        timer.start()
        for notification in subscription:
            got.append(notification.id)
            if len(got) == 3:
                break
        timer.cancel()
    assert got == [1, 2, 3]
    factory.close()


def test_blob_store_shares_the_environment_and_dedups(tmp_path: Path) -> None:
    store = tmp_path / "s"
    factory = open_factory(store)
    blobs = LMDBBlobStore(lmdb_env(store))
    assert blobs.store is factory.store
    data = b"hello\n" * 1000
    digest = blobs.put(data)
    assert blobs.put(data) == digest
    assert list(blobs.digests()) == [digest]
    assert blobs.get(digest) == data
    assert not blobs.has("00" * 32)
    assert blobs.verify() == []
    blobs.close()
    factory.close()
    reopened = LMDBBlobStore(lmdb_env(store))
    assert reopened.get(digest) == data
    reopened.close()
