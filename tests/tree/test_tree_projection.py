"""The conversation tree projection: structure, queries, checkpoints, forks."""

from __future__ import annotations

from pathlib import Path
from uuid import UUID

import pytest

from coder_es.application import CoderApp
from coder_es.domain.session import Session
from coder_es.errors import UnknownNodeError
from coder_es.store.config import StoreConfig
from coder_es.store.views import ViewRecord
from projections.checkpoint import encode_state
from projections.tree import FORMAT, ConversationTree, full_path, path_events, track_tree


def _answer(s: Session, text: str) -> str:
    return s.record_model_response(
        blocks=[{"type": "text", "text": text}],
        stop_reason="end_turn",
        usage={},
        provider="scripted",
        model="m",
    )


def _branchy(app: CoderApp) -> tuple[UUID, dict[str, str]]:
    """root: u1 -> a1 -> u2 -> a2 ; u1 -> a1 -> u3 (branch) ; a second root message u4."""
    session = app.start_session(workspace="/w")
    n: dict[str, str] = {}

    def build(s: Session) -> None:
        n["u1"] = s.add_user_message("fix the test")
        n["a1"] = _answer(s, "which one?")
        n["u2"] = s.add_user_message("test_a")
        n["a2"] = _answer(s, "done")
        s.move_head(n["a1"], reason="fork")
        n["u3"] = s.add_user_message("test_b instead")
        s.label(n["u2"], "first-try")
        s.move_head(None, reason="checkout")
        n["u4"] = s.add_user_message("something else")
        s.move_head(n["u3"], reason="checkout")

    app.update(session.id, build)
    return session.id, n


def test_structure_and_queries(store_config: StoreConfig) -> None:
    app = CoderApp(store_config)
    try:
        sid, n = _branchy(app)
        tree = track_tree(app, sid).catch_up()
        assert tree.head_node == n["u3"]
        assert tree.path(n["a2"]) == [n["u1"], n["a1"], n["u2"], n["a2"]]
        assert tree.children(n["a1"]) == [n["u2"], n["u3"]]
        assert tree.siblings(n["u3"]) == [n["u2"]]
        assert tree.children(None) == [n["u1"], n["u4"]]
        assert tree.leaves() == [n["a2"], n["u3"], n["u4"]]
        assert tree.branch_points() == [None, n["a1"]]
        assert {(b.fork_point, b.start, b.tip) for b in tree.branches()} == {
            (None, n["u1"], n["u3"]),
            (None, n["u4"], n["u4"]),
            (n["a1"], n["u2"], n["a2"]),
            (n["a1"], n["u3"], n["u3"]),
        }
        assert tree.labels_of(n["u2"]) == ["first-try"]
        assert tree.resolve("first-try") == n["u2"]
        assert tree.kind(n["a1"]) == "assistant" and tree.kind(n["u1"]) == "user"
        assert tree.common_ancestor(n["a2"], n["u3"]) == n["a1"]
        assert tree.diverging(n["a2"], n["u3"]) == (n["a1"], [n["u2"], n["a2"]], [n["u3"]])
        assert tree.is_ancestor(n["u1"], n["a2"]) and not tree.is_ancestor(n["u2"], n["u3"])
        texts = [e.content[0]["text"] for e in path_events(app, tree, n["u3"])[::2]]
        assert texts == ["fix the test", "test_b instead"]
        with pytest.raises(UnknownNodeError):
            tree.path("999")
    finally:
        app.close()


def test_incremental_checkpointed_and_rebuilt_trees_are_identical(tmp_path: Path) -> None:
    app = CoderApp(StoreConfig(backend="sqlite", path=tmp_path / "store"))
    try:
        sid, _ = _branchy(app)
        tracked = track_tree(app, sid, every=3)
        tracked.catch_up()
        app.update(sid, lambda s: s.add_user_message("later"))
        tracked.catch_up()
        tracked.save()
        # A fresh process: the checkpoint is loaded and only newer events are applied.
        app.update(sid, lambda s: _answer(s, "even later"))
        reopened = track_tree(app, sid)
        assert reopened.position == tracked.position
        reopened.catch_up()
        rebuilt = track_tree(app, sid).rebuild()
        assert encode_state(reopened.projection, FORMAT) == encode_state(rebuilt, FORMAT)
        assert rebuilt.head_node == str(app.get_session(sid).version)
    finally:
        app.close()


def test_an_unreadable_checkpoint_costs_only_a_rebuild(tmp_path: Path) -> None:
    app = CoderApp(StoreConfig(backend="sqlite", path=tmp_path / "store"))
    try:
        sid, n = _branchy(app)
        app.views.put(f"tree:{sid}", ViewRecord(5, b"\x00garbage"))
        tree = track_tree(app, sid).catch_up()
        assert tree.leaves() == [n["a2"], n["u3"], n["u4"]]
    finally:
        app.close()


def test_a_forked_session_sees_the_parent_path_as_its_prefix(tmp_path: Path) -> None:
    app = CoderApp(StoreConfig(backend="popo", path=tmp_path))
    try:
        sid, n = _branchy(app)
        child = app.start_session(workspace="/w", parent_session=str(sid), parent_node=n["a1"])
        mine = app.update(child.id, lambda s: s.add_user_message("in the fork"))
        tree = track_tree(app, child.id).catch_up()
        assert tree.path(mine) == [mine]
        refs = [(r.session, r.node) for r in full_path(app, tree, mine)]
        assert refs == [(str(sid), n["u1"]), (str(sid), n["a1"]), (str(child.id), mine)]
        events = path_events(app, tree, mine)
        assert [type(e).__name__ for e in events] == [
            "UserMessageAdded",
            "ModelResponded",
            "UserMessageAdded",
        ]
        # Nothing was copied: the child's own log holds only its own events.
        assert len(app.session_events(child.id)) == 2
    finally:
        app.close()


def test_applying_an_event_twice_changes_nothing() -> None:
    s = Session.start(workspace="/w")
    s.add_user_message("a")
    _answer(s, "b")
    events = s.collect_events()
    once, twice = ConversationTree(), ConversationTree()
    for e in events:
        once.apply(e)
        twice.apply(e)
        twice.apply(e)
    assert encode_state(once, FORMAT) == encode_state(twice, FORMAT)
