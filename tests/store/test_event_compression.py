"""Events' states stored compressed when the store chooses it, and every application reads both
forms (issue 36, item 6: the events of 500 one-line edits took 1.74 MB of LMDB pages as plain
JSON, 0.79 MB compressed)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from eventsourcing.persistence import MapperDeserialisationError, StoredEvent

from coder_es.application import CoderApp
from coder_es.audit.verify import verify_store
from coder_es.errors import StoreError
from coder_es.store.compression import (
    MIN_SIZE,
    READ_TOPIC,
    READ_WRITE_TOPIC,
    TAG_V1,
    EventCompressor,
    EventReader,
)
from coder_es.store.config import StoreConfig

COMPRESSED = {"COMPRESSOR_TOPIC": READ_WRITE_TOPIC}
DIFF = "".join(f"-x{i:05d} old line {i}\n+x{i:05d} new line {i}\n" for i in range(20))


def _record(app: CoderApp) -> str:
    s = app.start_session(workspace="/w")
    sid = s.id
    app.update(sid, lambda s: s.add_user_message("hi"))
    app.update(
        sid,
        lambda s: s.complete_tool_call(tool_use_id="t1", name="edit", output="Edited\n" + DIFF),
    )
    return str(sid)


def test_states_are_stored_compressed_and_read_back(store_config: StoreConfig) -> None:
    app = CoderApp(store_config, env=COMPRESSED)
    try:
        sid = _record(app)
        stored = app.recorder.select_notifications(start=1, limit=100)
        big = [n for n in stored if n.state[:1] == TAG_V1]
        assert big, "no state was compressed"
        plain = app.mapper.compressor
        assert plain is not None
        for n in big:
            assert len(n.state) < len(plain.decompress(n.state)) / 2
        assert all(n.state[:1] == b"{" for n in stored if n not in big)
        (done,) = [e for e in app.session_events(app.resolve_session(sid)) if hasattr(e, "output")]
        assert done.output == "Edited\n" + DIFF
        assert verify_store(app).ok
    finally:
        app.close()
    if store_config.backend == "popo":
        return
    # Read by an application that writes plain states all the same.
    reader = CoderApp(store_config, env={"COMPRESSOR_TOPIC": READ_TOPIC})
    try:
        assert type(reader.mapper.compressor) is EventReader
        events = reader.session_events(reader.resolve_session(sid))
        assert events[-1].output == "Edited\n" + DIFF
        assert verify_store(reader).ok
    finally:
        reader.close()


def test_states_stored_as_json_before_read_back(store_config: StoreConfig) -> None:
    """A store written before compression: its plain JSON states decode as they always did."""
    app = CoderApp(store_config, env={"COMPRESSOR_TOPIC": ""})
    try:
        assert app.mapper.compressor is None
        sid = _record(app)
        before = [n.state for n in app.recorder.select_notifications(start=1, limit=100)]
        assert all(state[:1] == b"{" for state in before)
    finally:
        app.close()
    if store_config.backend == "popo":
        return
    reopened = CoderApp(store_config, env=COMPRESSED)
    try:
        assert isinstance(reopened.mapper.compressor, EventCompressor)
        events = reopened.session_events(reopened.resolve_session(sid))
        assert events[-1].output == "Edited\n" + DIFF
        assert verify_store(reopened).ok
    finally:
        reopened.close()


def test_states_are_compressed_by_default_and_plain_on_request() -> None:
    """A new store writes compressed states (issue 36, item 6); ``COMPRESSOR_TOPIC=`` the
    reader writes JSON text, as stores did before."""
    app = CoderApp()
    try:
        assert type(app.mapper.compressor) is EventCompressor
        _record(app)
        stored = app.recorder.select_notifications(start=1, limit=100)
        assert any(n.state[:1] == TAG_V1 for n in stored)
    finally:
        app.close()
    plain = CoderApp(env={"COMPRESSOR_TOPIC": READ_TOPIC})
    try:
        _record(plain)
        stored = plain.recorder.select_notifications(start=1, limit=100)
        assert all(n.state[:1] == b"{" for n in stored)
    finally:
        plain.close()


def test_a_tampered_compressed_state_is_found_by_verify(tmp_path: Path) -> None:
    """The hash chain covers an event's decoded fields, not its stored bytes: a compressed state
    whose JSON is edited and encoded again is found as modified, like a plain one."""
    config = StoreConfig(backend="sqlite", path=tmp_path / "store")
    app = CoderApp(config)
    try:
        sid = app.resolve_session(_record(app))
        assert verify_store(app).ok
    finally:
        app.close()
    with sqlite3.connect(config.sqlite_file) as conn:
        (state,) = conn.execute(
            "SELECT state FROM stored_events WHERE originator_id = ? AND originator_version = 3",
            (sid.hex,),
        ).fetchone()
        assert state[:1] == TAG_V1
        text = EventReader().decompress(state)
        forged = EventCompressor().compress(text.replace(b"new line 7", b"NEW line 7"))
        assert forged[:1] == TAG_V1 and forged != state
        conn.execute(
            "UPDATE stored_events SET state = ? WHERE originator_id = ? AND originator_version = 3",
            (forged, sid.hex),
        )
    app = CoderApp(config)
    try:
        report = verify_store(app)
    finally:
        app.close()
    assert {(p.version, p.kind) for p in report.problems} == {(3, "modified")}


def test_small_states_stay_json_and_a_damaged_one_says_so() -> None:
    c = EventCompressor()
    small = b'{"a":1}'
    assert c.compress(small) == small and c.decompress(small) == small
    big = b'{"output":"' + DIFF.encode() + b'"}'
    assert len(big) >= MIN_SIZE
    packed = c.compress(big)
    assert packed[:1] == TAG_V1 and c.decompress(packed) == big
    for damaged in (packed[:-5], packed[:1] + b"\xff" * 20):
        with pytest.raises(StoreError):
            c.decompress(damaged)


def test_a_damaged_compressed_state_is_one_clear_error(store_config: StoreConfig) -> None:
    app = CoderApp(store_config, env=COMPRESSED)
    try:
        sid = app.resolve_session(_record(app))
        last = app.recorder.select_notifications(start=1, limit=100)[-1]
        assert last.state[:1] == TAG_V1
        bad = StoredEvent(last.originator_id, last.originator_version, last.topic, last.state[:-9])
        # What a damaged JSON state raises, naming the event (the CLI's one line says which).
        with pytest.raises(MapperDeserialisationError, match=r"ToolCallCompleted.*cut short"):
            app.mapper.to_domain_event(bad)
        assert app.get_session(sid).version == last.originator_version
    finally:
        app.close()
