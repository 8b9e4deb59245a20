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
