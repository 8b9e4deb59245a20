"""Session reads decode topic ids and check notification ids as byte columns of the joined index
keys (issue 36.5); every case the columns do not cover must still read back exactly."""

from __future__ import annotations

import uuid
from pathlib import Path

import lmdb
import pytest
from eventsourcing.persistence import DataError, InfrastructureFactory, Notification, StoredEvent
from eventsourcing.utils import Environment

from coder_es.store.lmdb_codec import nid_column


def _recorder(path: Path) -> tuple[object, object]:
    env = Environment("t", {"PERSISTENCE_MODULE": "coder_es.store.lmdb", "LMDB_PATH": str(path)})
    factory = InfrastructureFactory.construct(env)
    return factory, factory.application_recorder()


def _events(oid: uuid.UUID | str, first: int, topics: list[str]) -> list[StoredEvent]:
    return [
        StoredEvent(oid, first + i, topic, f"{oid}:{first + i}".encode())
        for i, topic in enumerate(topics)
    ]


def test_ids_past_255_interleaved_sessions_and_str_ids_read_back(tmp_path: Path) -> None:
    factory, recorder = _recorder(tmp_path / "s")
    try:
        # 300 topics: the last ones get ids past 255 (a 4-byte id with a non-zero high byte).
        many = [f"m:T{i}" for i in range(300)]
        a = uuid.uuid4()
        recorder.insert_events(_events(a, 1, many))  # type: ignore[attr-defined]
        # b's events interleave with c's: its notification ids are not consecutive.
        b, c = uuid.uuid4(), "a-str-id"
        written: dict[object, list[StoredEvent]] = {a: _events(a, 1, many), b: [], c: []}
        for v in range(1, 41, 4):
            for oid in (b, c):
                batch = _events(oid, v, ["m:T1", "m:T299", "m:T2", "m:T1"])
                recorder.insert_events(batch)  # type: ignore[attr-defined]
                written[oid] += batch
        # d: small topic ids and consecutive notification ids (the byte-column path).
        d = uuid.uuid4()
        written[d] = _events(d, 1, ["m:T1", "m:T2", "m:T3"] * 20)
        recorder.insert_events(written[d])  # type: ignore[attr-defined]
        for oid, expected in written.items():
            got = list(recorder.select_events(oid))  # type: ignore[attr-defined]
            assert got == expected
            assert [e.topic for e in got] == [e.topic for e in expected]
        # A fresh recorder (an empty topic cache) reads the same.
        factory.close()  # type: ignore[attr-defined]
        factory, recorder = _recorder(tmp_path / "s")
        for oid, expected in written.items():
            assert list(recorder.select_events(oid)) == expected  # type: ignore[attr-defined]
            assert list(recorder.select_events(oid, gt=2, lte=9)) == expected[2:9]  # type: ignore[attr-defined]
    finally:
        factory.close()  # type: ignore[attr-defined]


def test_sessions_across_id_byte_boundaries_and_out_of_order_versions_read_back(
    tmp_path: Path,
) -> None:
    factory, recorder = _recorder(tmp_path / "s")
    try:
        # 250 events of other sessions: a's notification ids run 251..570, across the carries
        # into the second byte at 256 and 512.
        recorder.insert_events(_events(uuid.uuid4(), 1, ["m:T"] * 250))  # type: ignore[attr-defined]
        a = uuid.uuid4()
        written = {a: _events(a, 1, ["m:T", "m:U"] * 160)}
        recorder.insert_events(written[a])  # type: ignore[attr-defined]
        # b's versions are recorded out of order in one batch: its ids span exactly as many
        # values as it has events, but not in version order.
        b = uuid.uuid4()
        batch = [_events(b, v, ["m:T"])[0] for v in (1, 3, 2, 4)]
        recorder.insert_events(batch)  # type: ignore[attr-defined]
        written[b] = sorted(batch, key=lambda e: e.originator_version)
        # c's versions have gaps (1, 2, 5, 9) and consecutive ids.
        c = "c"
        written[c] = [_events(c, v, ["m:U"])[0] for v in (1, 2, 5, 9)]
        recorder.insert_events(written[c])  # type: ignore[attr-defined]
        for oid, expected in written.items():
            assert list(recorder.select_events(oid)) == expected  # type: ignore[attr-defined]
        assert list(recorder.select_events(a, gt=5, lte=300)) == written[a][5:300]  # type: ignore[attr-defined]
        assert list(recorder.select_events(c, gt=2)) == written[c][2:]  # type: ignore[attr-defined]
    finally:
        factory.close()  # type: ignore[attr-defined]


def test_expected_id_columns_match_the_ids_at_every_carry() -> None:
    for first in (1, 255, 256, 65_530, 2**24 - 3, 2**32 - 5, 2**56 - 2, 2**63, 2**64 - 300):
        for n in (2, 3, 300, 70_000):
            if first + n > 2**64:
                continue
            packed = b"".join(i.to_bytes(8, "big") for i in range(first, first + n))
            for byte in range(8):
                assert nid_column(first, n, byte) == packed[byte::8], (first, n, byte)


def _log(recorder: object, limit: int) -> list[Notification]:
    """The whole log, read in pages of ``limit``."""
    out: list[Notification] = []
    while page := recorder.select_notifications(  # type: ignore[attr-defined]
        out[-1].id if out else None, limit, inclusive_of_start=not out
    ):
        out += page
    return out


def test_log_pages_of_one_originator_and_of_several_decode_like_the_constructors(
    tmp_path: Path,
) -> None:
    # Pages whose rows all have one originator key read it (and the topic ids) as byte columns;
    # every page where that does not hold must read as before.
    factory, recorder = _recorder(tmp_path / "s")
    try:
        a = uuid.uuid4()
        # b differs from a in the last byte of its key only; c and d are str ids of one length.
        b = uuid.UUID(int=a.int ^ 1)
        batches = [
            _events(a, 1, [f"m:T{i}" for i in range(300)]),  # topic ids past 255
            _events(b, 1, ["m:T1", "m:T2"]),
            _events(a, 301, ["m:T3"] * 3),
            _events("sess-c", 1, ["m:T1"] * 5),
            _events("sess-d", 1, ["m:T2"] * 2),
            [StoredEvent(a, v, "m:T1", b"far") for v in (2**40, 2**40 + 1)],
            [StoredEvent("sess-c", v, "m:T2", b"neg") for v in (-5, -4)],
        ]
        expected: list[Notification] = []
        for batch in batches:
            ids = recorder.insert_events(batch)  # type: ignore[attr-defined]
            expected += [
                Notification(e.originator_id, e.originator_version, e.topic, e.state, i)
                for e, i in zip(batch, ids, strict=True)
            ]
        for limit in (1, 2, 3, 7, 500):
            assert _log(recorder, limit) == expected, limit
        # A fresh recorder (empty caches) reads the same, also past a gap in a page's ids.
        factory.close()  # type: ignore[attr-defined]
        # (a's event 302, where ids and versions differ: pages of 2 hold a's 301 and 303 alone.)
        _delete_log_row(tmp_path / "s", expected[303].id)
        factory, recorder = _recorder(tmp_path / "s")
        del expected[303]
        for limit in (2, 3, 500):
            assert _log(recorder, limit) == expected, limit
    finally:
        factory.close()  # type: ignore[attr-defined]


def test_a_topic_id_missing_from_its_table_is_one_data_error(tmp_path: Path) -> None:
    factory, recorder = _recorder(tmp_path / "s")
    recorder.insert_events(_events(uuid.uuid4(), 1, ["m:T1", "m:T2"] * 3))  # type: ignore[attr-defined]
    factory.close()  # type: ignore[attr-defined]
    env = lmdb.open(str(tmp_path / "s"), max_dbs=256)
    with env.begin(write=True) as txn:
        topics = env.open_db(b"coder_es.topics", txn=txn, create=False)
        assert txn.delete(b"#" + (2).to_bytes(4, "big"), db=topics)
    env.close()
    factory, recorder = _recorder(tmp_path / "s")
    try:
        with pytest.raises(DataError, match="topic id 00000002 is not in its table"):
            recorder.select_notifications(None, 10)  # type: ignore[attr-defined]
    finally:
        factory.close()  # type: ignore[attr-defined]


def _delete_log_row(store: Path, nid: int) -> None:
    """Damage the store behind the recorder's back: remove notification ``nid`` from the log."""
    env = lmdb.open(str(store), max_dbs=256)
    with env.begin(write=True) as txn:
        cursor = txn.cursor(db=env.open_db(b"t:n:events", txn=txn, create=False))
        assert cursor.set_range(nid.to_bytes(8, "big")) and cursor.delete()
    env.close()
