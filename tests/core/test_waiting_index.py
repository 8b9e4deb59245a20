"""Issue 34, figure 2: ``pending`` reads an index of waiting sessions kept beside the log
(``service.waiting_index``), not a fold of every session that ever parked. The index must say
exactly what folding the sessions says, after every kind of change, and be rebuildable."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from coder_es.application import CoderApp
from coder_es.domain.session import Session
from coder_es.service.waiting import answer, answered_unresumed, pending, questions_in
from coder_es.service.waiting_index import KEY, WaitingIndex
from coder_es.store.config import StoreConfig
from coder_es.store.views import ViewRecord


def _parked(app: CoderApp, call: str) -> Session:
    s = Session.start(workspace="/w", model="m", title=call)
    s.add_user_message([{"type": "text", "text": "go"}])
    block: dict[str, Any] = {"type": "tool_use", "id": call, "name": "write", "input": {}}
    node = s.record_model_response(
        blocks=[block], stop_reason="tool_use", usage={}, provider="scripted", model="m"
    )
    s.request_tool_call(node=node, tool_use_id=call, name="write", input={})
    s.defer_permission(
        tool_use_id=call,
        tool="write",
        subject=f"/x/{call}",
        matched_rule=None,
        reason="outside",
        source="run --defer",
        suggested_pattern=f"/x/{call}",
    )
    s.park_turn(tool_use_ids=[call], by={"client": "test"})
    app.save(s)
    return s


def _folded(app: CoderApp) -> list[tuple[str, str]]:
    """What folding every session of the store says is waiting (the index's oracle)."""
    out = []
    for summary in app.list_sessions(archived=None):
        out += [(q.session, q.call) for q in questions_in(app.session_events(summary.id))]
    return sorted(out)


def _listed(app: CoderApp) -> list[tuple[str, str]]:
    return sorted((q.session, q.call) for q in pending(app))


def test_the_index_follows_parking_answers_and_new_messages(
    persistent_store_config: StoreConfig,
) -> None:
    store_config = persistent_store_config
    app = CoderApp(store_config)
    try:
        quiet = Session.start(workspace="/w", model="m", title="quiet")
        quiet.add_user_message([{"type": "text", "text": "hello"}])
        app.save(quiet)
        a, b = _parked(app, "ca"), _parked(app, "cb")
        assert _listed(app) == _folded(app) == sorted([(str(a.id), "ca"), (str(b.id), "cb")])
        stored = WaitingIndex.decode(app.views.get(KEY))
        assert set(stored.waiting) == {str(a.id), str(b.id)}
        assert str(quiet.id) not in stored.ever  # never loaded: it never parked

        # Answered by another application on the same store: gone from the list.
        other = CoderApp(store_config)
        try:
            answer(other, str(a.id), [], decision="allow", by={"client": "other"})
        finally:
            other.close()
        assert _listed(app) == _folded(app) == [(str(b.id), "cb")]
        # Answered, not taken up yet: ready for a resume (a fleet worker's sweep queues it).
        assert answered_unresumed(app) == [str(a.id)]

        # A new message abandons the parked call (closed with a result): nothing waits.
        s = app.get_session(b.id)
        s.complete_tool_call(tool_use_id="cb", name="write", output="Not run", is_error=True)
        s.add_user_message([{"type": "text", "text": "never mind"}])
        app.save(s)
        assert _listed(app) == _folded(app) == []

        # A third one parks later: caught up without folding the answered ones again.
        c = _parked(app, "cc")
        assert _listed(app) == _folded(app) == [(str(c.id), "cc")]
    finally:
        app.close()


def test_a_lost_or_damaged_index_is_rebuilt_from_the_log(tmp_path: Any) -> None:
    app = CoderApp(StoreConfig("sqlite", tmp_path / "store"))
    try:
        a = _parked(app, "ca")
        assert _listed(app) == [(str(a.id), "ca")]
        app.views.put(KEY, ViewRecord(10**9, b"not json"))
        assert _listed(app) == [(str(a.id), "ca")]
        app.views.delete(KEY)
        assert _listed(app) == [(str(a.id), "ca")]
        # Rebuilt from notification 0: the new record names a real position.
        record = app.views.get(KEY)
        assert record is not None and record.position > 0
    finally:
        app.close()


def test_only_sessions_touched_since_the_last_read_are_loaded(tmp_path: Any) -> None:
    app = CoderApp(StoreConfig("sqlite", tmp_path / "store"))
    loaded: list[UUID] = []
    real = app.session_events

    def counting(sid: UUID, **kw: Any) -> list[Any]:
        loaded.append(sid)
        return real(sid, **kw)

    app.session_events = counting  # type: ignore[method-assign]
    try:
        parked = [_parked(app, f"c{i}") for i in range(5)]
        assert len(pending(app)) == 5
        assert len(loaded) == 5
        loaded.clear()
        assert len(pending(app)) == 5
        assert loaded == []  # nothing new: one record read, no session loaded
        _parked(app, "c9")
        assert len(pending(app)) == 6
        assert len(loaded) == 1
        assert parked[0].id not in loaded
    finally:
        app.close()
