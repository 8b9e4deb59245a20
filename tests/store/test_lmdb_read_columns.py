"""Session reads decode topic ids and check notification ids as byte columns of the joined index
keys (issue 36.5); every case the columns do not cover must still read back exactly."""

from __future__ import annotations

import uuid
from pathlib import Path

from eventsourcing.persistence import InfrastructureFactory, StoredEvent
from eventsourcing.utils import Environment


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
    from coder_es.store.lmdb import _nid_column

    for first in (1, 255, 256, 65_530, 2**24 - 3, 2**32 - 5, 2**56 - 2, 2**63, 2**64 - 300):
        for n in (2, 3, 300, 70_000):
            if first + n > 2**64:
                continue
            packed = b"".join(i.to_bytes(8, "big") for i in range(first, first + n))
            for byte in range(8):
                assert _nid_column(first, n, byte) == packed[byte::8], (first, n, byte)
