"""The fast chain hashing gives the standard path's bytes, and the split ``verify --all`` reports
exactly what the sequential one does, on intact and on tampered stores."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from eventsourcing.persistence import StoredEvent
from hypothesis import given, settings
from hypothesis import strategies as st

from coder_es.application import CoderApp
from coder_es.audit import verify as verify_module
from coder_es.audit.fastlink import FastLinker
from coder_es.audit.problems import VerifyReport
from coder_es.audit.records import EventDecoder
from coder_es.audit.segments import scan_parallel, stitch
from coder_es.audit.verify import _exact_pass, verify_store
from coder_es.domain.chain import canonical_json
from coder_es.domain.session import Session
from coder_es.store.config import StoreConfig
from tests.audit.conftest import plain_state, record_demo, repacked, sqlite_tampering

pytestmark = pytest.mark.timeout(180)

TOPIC = "coder_es.domain.session:Session.UserMessageAdded"

# Every JSON value a stored state can hold, floats (NaN, infinities) and huge integers included.
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**90), max_value=2**90)
    | st.floats()
    | st.text()
    | st.sampled_from(["\u2028", "\x7f", "\ufeff", "\U0001f600", "\\", '"', "\x00", "é"])
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=25,
)
field_names = st.text().filter(lambda k: k != "timestamp")


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CoderApp]:
    application = CoderApp(StoreConfig(backend="popo", path=tmp_path_factory.mktemp("popo")))
    try:
        yield application
    finally:
        application.close()


def _stored(app: CoderApp, fields: dict[str, Any], version: int = 3) -> StoredEvent:
    when = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=timezone(timedelta(hours=2)))
    state = app.mapper.transcoder.encode({"timestamp": when, **fields})
    return StoredEvent(
        originator_id=UUID(int=7), originator_version=version, topic=TOPIC, state=state
    )


def _outcome(fn: Any, stored: StoredEvent) -> Any:
    try:
        return ("ok", fn(stored))
    except Exception as e:  # the standard path's error is the expected outcome then
        return ("error", type(e))


def _same_link(app: CoderApp, stored: StoredEvent) -> None:
    fast, slow = FastLinker(app.mapper), EventDecoder(app.mapper)
    expected = _outcome(slow.link, stored)
    assert _outcome(fast.link, stored) == expected
    assert _outcome(lambda s: fast.links([s])[0], stored) == expected
    built = _outcome(fast.decode, stored)
    reference = _outcome(slow.decode, stored)
    if expected[0] == "ok":
        # Compared through their canonical form: a NaN field is not equal to itself.
        assert built[0] == reference[0] == "ok"
        mine, theirs = built[1], reference[1]
        assert mine.chain_hash == theirs.chain_hash == expected[1][0]
        assert canonical_json(mine.record()) == canonical_json(theirs.record())
    else:
        assert built == reference


@settings(max_examples=400, deadline=None)
@given(fields=st.dictionaries(field_names, values, max_size=6), prev=st.none() | st.text())
def test_fast_hash_equals_the_standard_one_for_any_json_state(
    app: CoderApp, fields: dict[str, Any], prev: str | None
) -> None:
    _same_link(app, _stored(app, {"prev_hash": prev, **fields}))


@settings(max_examples=300, deadline=None)
@given(
    fields=st.dictionaries(field_names, values, max_size=4),
    where=st.floats(min_value=0, max_value=1),
    cut=st.integers(min_value=0, max_value=4),
    insert=st.binary(max_size=6)
    | st.sampled_from([b'"', b"\\", b"\\u0000", b"\\ud800", b"NaN", b"1.5", b"\xff", b" "]),
)
def test_damaged_states_hash_or_fail_as_the_standard_path_does(
    app: CoderApp, fields: dict[str, Any], where: float, cut: int, insert: bytes
) -> None:
    """A tampered state must be read by the fast path exactly as by the standard one."""
    good = _stored(app, {"prev_hash": "ab" * 32, **fields})
    at = int(where * len(good.state))
    state = good.state[:at] + insert + good.state[at + cut :]
    _same_link(app, StoredEvent(good.originator_id, good.originator_version, TOPIC, state))


def test_odd_states_that_json_and_msgspec_read_differently(app: CoderApp) -> None:
    stamp = b'"timestamp":{"_type_":"datetime_iso","_data_":"2026-01-01T00:00:00+00:00"}'
    for body in (
        b'{"a":1,"a":2,' + stamp + b"}",  # a repeated key
        b'{"a":1e16,' + stamp + b"}",  # 1e+16 in the canonical form
        b'{"a":NaN,' + stamp + b"}",
        b'{"a":"\\ud800",' + stamp + b"}",  # a lone surrogate: no UTF-8 form at all
        b'{"a":"\\ud83d\\ude00",' + stamp + b"}",
        b'{"timestamp":1,' + stamp + b"}",
        b"[" + stamp[12:] + b"]",
        b'{"class_version":2,"prev_hash":"","x":-0,' + stamp + b"}",
        b' {"a": [1, 2] ,' + stamp + b"} ",
    ):
        _same_link(app, StoredEvent(UUID(int=1), 1, TOPIC, body))


def test_real_sessions_take_the_fast_path(app: CoderApp) -> None:
    sid = record_demo(app)
    linker = FastLinker(app.mapper)
    stored = app.stored_events(sid)
    assert [linker.link(s) for s in stored] == [EventDecoder(app.mapper).link(s) for s in stored]
    assert linker.fallbacks == 0
    with_float = _stored(app, {"prev_hash": "", "cost": 0.25})
    assert linker.link(with_float) == EventDecoder(app.mapper).link(with_float)
    assert linker.fallbacks == 1


# ---------------------------------------------------------------------------- split verify


def _fill(app: CoderApp) -> list[UUID]:
    """The demo session plus three sessions written in turns, so each spans the whole log."""
    ids = [record_demo(app)]
    others = [app.start_session(workspace=f"/w{i}").id for i in range(3)]
    for turn in range(12):
        for n, sid in enumerate(others):
            text = f"turn {turn} of {n}"

            def say(session: Session, text: str = text) -> None:
                session.add_user_message(text)

            app.update(sid, say)
    return ids + others


@pytest.fixture
def split(monkeypatch: pytest.MonkeyPatch) -> None:
    """Split even a small store across two processes."""
    monkeypatch.setattr(verify_module, "PARALLEL_MIN_EVENTS", 0)


def _reports(config: StoreConfig) -> tuple[VerifyReport, VerifyReport, VerifyReport]:
    """(split across 2 processes, one process, the exact pass): none advances anchors."""
    app = CoderApp(config)
    try:
        return (
            verify_store(app, workers=2, advance=False),
            verify_store(app, workers=1, advance=False),
            _exact_pass(app, check_blobs=True, advance=False),
        )
    finally:
        app.close()


@pytest.mark.parametrize("backend", ["lmdb", "sqlite"])
def test_split_verify_of_an_intact_store_equals_the_exact_pass(
    backend: str, tmp_path: Path, split: None
) -> None:
    config = StoreConfig(backend=backend, path=tmp_path / "store", durable=False)
    app = CoderApp(config)
    try:
        ids = _fill(app)
    finally:
        app.close()
    app = CoderApp(config)
    try:
        # The worker process really scans its half (a failing one would leave it to the exact pass).
        last_id = app.recorder.max_notification_id() or 0
        halves = scan_parallel(app, last_id, {}, True, 2)
        intact, broken, events = stitch(halves, lambda session: None)
    finally:
        app.close()
    assert len(halves) == 2 and all(h.events > 0 for h in halves)
    assert not broken and events == 23 + 3 * 13 and len(intact) == 4
    parallel, single, exact = _reports(config)
    assert parallel == single == exact
    assert parallel.ok and parallel.sessions == 4 and parallel.events == 23 + 3 * 13
    assert parallel.blobs == 5
    assert {h.session for h in parallel.heads} == {str(i) for i in ids}


def _tamper(config: StoreConfig, statements: list[tuple[str, tuple[Any, ...]]]) -> None:
    with sqlite_tampering(config.sqlite_file) as conn:
        for sql, params in statements:
            conn.execute(sql, params)


ROW = "WHERE originator_id = ? AND originator_version = ?"


@pytest.fixture
def sqlite_store(tmp_path: Path) -> tuple[StoreConfig, list[UUID]]:
    config = StoreConfig(backend="sqlite", path=tmp_path / "store", durable=False)
    app = CoderApp(config)
    try:
        ids = _fill(app)
    finally:
        app.close()
    return config, ids


@pytest.mark.parametrize(
    "damage",
    ["modified", "deleted", "swapped", "truncated", "blob", "last_modified"],
)
def test_split_verify_of_a_tampered_store_names_what_the_exact_pass_names(
    damage: str, sqlite_store: tuple[StoreConfig, list[UUID]], split: None
) -> None:
    config, ids = sqlite_store
    demo, late = ids[0].hex, ids[3].hex  # `late` has events in both halves of the log
    every: dict[str, list[tuple[str, tuple[Any, ...]]]] = {
        "modified": [
            (
                f"UPDATE stored_events SET state = CAST(replace(CAST(state AS TEXT), 'turn 9 of 2',"
                f" 'turn 9 of 5') AS BLOB) {ROW}",
                (late, 11),
            )
        ],
        "deleted": [(f"DELETE FROM stored_events {ROW}", (late, 8))],
        "swapped": [
            (f"UPDATE stored_events SET originator_version = -1 {ROW}", (demo, 5)),
            (f"UPDATE stored_events SET originator_version = 5 {ROW}", (demo, 6)),
            (f"UPDATE stored_events SET originator_version = 6 {ROW}", (demo, -1)),
        ],
        "truncated": [
            (
                "DELETE FROM stored_events WHERE originator_id = ? AND originator_version > 10",
                (late,),
            )
        ],
        "blob": [
            (
                "DELETE FROM coder_es_blobs"
                " WHERE digest = (SELECT min(digest) FROM coder_es_blobs)",
                (),
            )
        ],
        "last_modified": [
            (
                "UPDATE stored_events SET state = "
                "CAST(replace(CAST(state AS TEXT), 'turn 11 of 2',"
                f" 'turn 12 of 2') AS BLOB) {ROW}",
                (late, 13),
            )
        ],
    }
    _tamper(config, every[damage])
    parallel, single, exact = _reports(config)
    assert parallel == single == exact
    expected = {
        "modified": {(11, "modified")},
        "deleted": {(8, "deleted")},
        "swapped": {(5, "reordered"), (6, "reordered")},
        "truncated": {(11, "truncated")},
        "blob": {(None, "blob_missing")},
        "last_modified": {(13, "modified")},
    }[damage]
    found = {(p.version if p.kind != "blob_missing" else None, p.kind) for p in parallel.problems}
    assert found == expected, parallel.problems


def test_split_verify_catches_tampered_lmdb_values(tmp_path: Path, split: None) -> None:
    import lmdb

    config = StoreConfig(backend="lmdb", path=tmp_path / "store", durable=False)
    app = CoderApp(config)
    try:
        ids = _fill(app)
    finally:
        app.close()
    env = lmdb.open(str(config.lmdb_dir), max_dbs=64)
    changed = 0
    try:
        with env.begin() as txn:
            names = [key for key, _ in txn.cursor()]
        for name in names:
            db = env.open_db(name, create=False)
            with env.begin(write=True, db=db) as txn:
                for key, value in list(txn.cursor()):
                    text = plain_state(value)
                    if b"turn 6 of 1" in text:
                        txn.put(key, repacked(value, text.replace(b"turn 6 of 1", b"turn 6 of 7")))
                        changed += 1
    finally:
        env.close()
    assert changed
    parallel, single, exact = _reports(config)
    assert parallel == single == exact
    assert {(p.session, p.version, p.kind) for p in parallel.problems} == {
        (str(ids[2]), 8, "modified")
    }


def test_a_worker_that_cannot_start_leaves_the_answer_to_the_exact_pass(
    tmp_path: Path, split: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = StoreConfig(backend="sqlite", path=tmp_path / "store", durable=False)
    app = CoderApp(config)
    try:
        _fill(app)
        monkeypatch.setattr("sys.executable", str(tmp_path / "no-such-python"))
        report = verify_store(app, workers=2, advance=False)
    finally:
        app.close()
    assert report.ok and report.events == 23 + 3 * 13
