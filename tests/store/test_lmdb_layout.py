"""The on-disk layout of the LMDB store: each state is kept once, old formats are refused, and a
session index that points at a missing event is reported, not silently shortened."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import lmdb
import pytest
from eventsourcing.persistence import (
    DataError,
    InfrastructureFactory,
    IntegrityError,
    Notification,
    StoredEvent,
)
from eventsourcing.utils import Environment

from coder_es.errors import StoreError
from coder_es.store.lmdb import LMDBFactory
from coder_es.store.lmdb_env import DATA_FILE, FORMAT_KEY, META_DB


def open_factory(path: Path) -> LMDBFactory:
    env = {"PERSISTENCE_MODULE": "coder_es.store.lmdb", "LMDB_PATH": str(path)}
    factory = InfrastructureFactory.construct(Environment(name="app", env=env))
    assert isinstance(factory, LMDBFactory)
    return factory


def delete_second_notification(store: Path) -> None:
    """Damage the store behind the recorder's back: remove the log's second row."""
    env = lmdb.open(str(store), max_dbs=256)
    with env.begin(write=True) as txn:
        log = env.open_db(b"app:n:events", txn=txn, create=False)
        cursor = txn.cursor(db=log)
        assert cursor.first() and cursor.next()
        cursor.delete()
    env.close()


def test_each_state_takes_its_size_once(tmp_path: Path) -> None:
    store = tmp_path / "store"
    factory = open_factory(store)
    recorder = factory.application_recorder()
    recorder.insert_events([StoredEvent(uuid.uuid4(), 1, "t", b"warm")])
    before = os.path.getsize(store / DATA_FILE)
    oid = uuid.uuid4()
    # Random bytes: nothing along the way can shrink them, so two copies would show.
    states = [os.urandom(20_000) for _ in range(200)]
    for first in range(0, len(states), 50):
        recorder.insert_events(
            [StoredEvent(oid, v + 1, "t", states[v]) for v in range(first, first + 50)]
        )
    factory.close()
    grown = os.path.getsize(store / DATA_FILE) - before
    total = sum(map(len, states))
    assert grown < 1.3 * total, f"store grew {grown} bytes for {total} bytes of state"

    factory = open_factory(store)
    recorder = factory.application_recorder()
    assert [e.state for e in recorder.select_events(oid)] == states
    assert [n.state for n in recorder.select_notifications(2, 300)] == states
    factory.close()


def test_store_of_an_older_format_is_refused_and_left_untouched(tmp_path: Path) -> None:
    store = tmp_path / "store"
    factory = open_factory(store)
    factory.application_recorder().insert_events([StoredEvent(uuid.uuid4(), 1, "t", b"s")])
    factory.close()
    env = lmdb.open(str(store), max_dbs=256)
    with env.begin(write=True) as txn:
        txn.put(FORMAT_KEY, b"coder_es.lmdb/2", db=env.open_db(META_DB, txn=txn))
    env.close()
    content = (store / DATA_FILE).read_bytes()

    with pytest.raises(StoreError) as caught:
        open_factory(store)
    message = str(caught.value)
    assert str(store) in message and "coder_es.lmdb/2" in message and "coder_es.lmdb/3" in message
    assert (store / DATA_FILE).read_bytes() == content


def test_event_missing_from_the_log_is_reported_as_damage(tmp_path: Path) -> None:
    store = tmp_path / "store"
    factory = open_factory(store)
    recorder = factory.application_recorder()
    oid = uuid.uuid4()
    recorder.insert_events([StoredEvent(oid, v, "t", b"s%d" % v) for v in range(1, 4)])
    factory.close()
    delete_second_notification(store)  # the second event

    factory = open_factory(store)
    recorder = factory.application_recorder()
    with pytest.raises(DataError, match="damaged"):
        recorder.select_events(oid)
    # The log itself reads on past the gap, each row with the id it was recorded under.
    found = recorder.select_notifications(None, 10)
    assert [(n.id, n.originator_version, n.state) for n in found] == [(1, 1, b"s1"), (3, 3, b"s3")]
    factory.close()


def test_a_gap_in_a_session_followed_by_other_events_is_still_damage(tmp_path: Path) -> None:
    # The fast read of a session whose events sit together in the log must not fill a gap with
    # the next session's event.
    store = tmp_path / "store"
    factory = open_factory(store)
    recorder = factory.application_recorder()
    oid, other = uuid.uuid4(), uuid.uuid4()
    recorder.insert_events([StoredEvent(oid, v, "t", b"s%d" % v) for v in range(1, 4)])
    recorder.insert_events([StoredEvent(other, v, "t", b"o%d" % v) for v in range(1, 3)])
    factory.close()
    delete_second_notification(store)  # the second event of the first session

    factory = open_factory(store)
    recorder = factory.application_recorder()
    with pytest.raises(DataError, match="damaged"):
        recorder.select_events(oid)
    assert [e.state for e in recorder.select_events(other)] == [b"o1", b"o2"]
    factory.close()


def test_a_page_of_mixed_originator_ids_decodes_like_the_constructors(tmp_path: Path) -> None:
    # UUID and str ids of different lengths give notification keys of different widths, which
    # the decoder cannot split with one fixed layout.
    factory = open_factory(tmp_path / "store")
    recorder = factory.application_recorder()
    written = [
        StoredEvent(uuid.uuid4(), 1, "a.Topic", b"u"),
        StoredEvent("s", 1, "b.Topic", b"short"),
        StoredEvent("a much longer session name", 7, "a.Topic", b"long"),
        StoredEvent(uuid.uuid4(), -3, "c.Topic", b""),
    ]
    ids = recorder.insert_events(written)
    assert ids is not None
    expected = [
        Notification(s.originator_id, s.originator_version, s.topic, s.state, i)
        for s, i in zip(written, ids, strict=True)
    ]
    assert recorder.select_notifications(None, 10) == expected
    assert recorder.select_notifications(ids[1], 2) == expected[1:3]
    factory.close()


@pytest.mark.parametrize("recorder_kind", ["application", "aggregate"])
def test_a_batch_overlapping_recorded_versions_anywhere_is_refused_whole(
    tmp_path: Path, recorder_kind: str
) -> None:
    factory = open_factory(tmp_path / "store")
    recorder = (
        factory.application_recorder()
        if recorder_kind == "application"
        else factory.aggregate_recorder("snapshots")
    )
    oid = uuid.uuid4()
    recorder.insert_events([StoredEvent(oid, 5, "t", b"five")])
    batches = {
        "run over it": [StoredEvent(oid, v, "t", b"x") for v in range(3, 8)],
        "run ending on it": [StoredEvent(oid, v, "t", b"x") for v in range(1, 6)],
        "out of order": [StoredEvent(oid, v, "t", b"x") for v in (7, 6, 5)],
        "repeated in the batch": [StoredEvent(oid, v, "t", b"x") for v in (8, 9, 8)],
    }
    for name, batch in batches.items():
        with pytest.raises(IntegrityError, match="already recorded"):
            recorder.insert_events(batch)
        assert [e.originator_version for e in recorder.select_events(oid)] == [5], name
    recorder.insert_events([StoredEvent(oid, v, "t", b"x") for v in (6, 7)])
    assert [e.originator_version for e in recorder.select_events(oid)] == [5, 6, 7]
    factory.close()
