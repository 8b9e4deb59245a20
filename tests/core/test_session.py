"""The Session aggregate: the tree, navigation, the hash chain and upcasting, on every backend."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from eventsourcing.persistence import IntegrityError
from eventsourcing.utils import clear_topic_cache, get_topic, register_topic

from coder_es.application import CoderApp
from coder_es.audit.verify import verify_session
from coder_es.domain.session import Session
from coder_es.errors import SessionNotFoundError, UnknownNodeError
from coder_es.store.config import StoreConfig


def test_nodes_form_a_tree_and_head_moves_without_deleting() -> None:
    s = Session.start(workspace="/w")
    first = s.add_user_message("fix the test")
    answer = s.record_model_response(
        blocks=[{"type": "text", "text": "done"}],
        stop_reason="end_turn",
        usage={},
        provider="scripted",
        model="m",
    )
    s.move_head(first, reason="fork")
    retry = s.add_user_message("try again differently")
    parents = {e.originator_version: e.parent for e in s.pending_events if hasattr(e, "parent")}
    assert parents == {int(first): None, int(answer): first, int(retry): first}
    assert s.head == retry and s.node_ids() == [first, answer, retry]
    s.move_head(answer, reason="checkout")
    assert s.head == answer and s.has_node(retry)


def test_nodes_resolve_by_id_label_and_unique_prefix() -> None:
    s = Session.start(workspace="/w")
    nodes = [s.add_user_message(f"m{i}") for i in range(12)]
    s.label(nodes[2], "before-refactor")
    assert s.resolve_node("before-refactor") == nodes[2]
    assert s.resolve_node(nodes[10]) == nodes[10]
    with pytest.raises(UnknownNodeError, match="no unique node"):
        s.resolve_node("nope")
    with pytest.raises(UnknownNodeError):
        s.move_head("999", reason="checkout")


def test_every_event_links_to_the_previous_one() -> None:
    s = Session.start(workspace="/w")
    s.add_user_message("a")
    s.label("2", "x")
    events = s.collect_events()
    assert events[0].prev_hash == ""
    for prev, event in itertools.pairwise(events):
        assert event.prev_hash == prev.chain_hash()
    assert s.chain_head == events[-1].chain_hash()


def test_app_round_trip_on_every_backend(store_config: StoreConfig) -> None:
    app = CoderApp(store_config)
    try:
        session = app.start_session(workspace="/w", title="demo", model="m")
        app.update(session.id, lambda s: s.add_user_message("hello"))
        app.update(session.id, lambda s: s.label("2", "start"))
        loaded = app.get_session(str(session.id)[:8])
        assert loaded.labels == {"start": "2"} and loaded.head == "2"
        assert [s.title for s in app.list_sessions()] == ["demo"]
        assert verify_session(app, str(session.id)).ok
        digest = app.blobs.put(b"same bytes")
        assert app.blobs.put(b"same bytes") == digest
        assert app.blobs.get(digest) == b"same bytes"
    finally:
        app.close()


def test_second_writer_on_same_version_conflicts_and_writes_nothing(
    store_config: StoreConfig,
) -> None:
    app = CoderApp(store_config)
    try:
        session = app.start_session(workspace="/w")
        one, two = app.get_session(session.id), app.get_session(session.id)
        one.add_user_message("from one")
        two.add_user_message("from two")
        two.add_user_message("and more from two")
        app.save(one)
        with pytest.raises(IntegrityError):
            app.save(two)
        events = app.session_events(session.id)
        assert [e.content[0]["text"] for e in events[1:]] == ["from one"]
    finally:
        app.close()


def test_unknown_session_is_a_clear_error() -> None:
    app = CoderApp()
    with pytest.raises(SessionNotFoundError, match="no unique session matches 'zzz'"):
        app.get_session("zzz")


class OldNote(Session.Event):
    """A note as version 1 of the code recorded it."""

    text: str


class Note(Session.Event):
    """The same note in version 2: an author was added."""

    class_version = 2
    text: str
    author: str

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        state["author"] = "unknown"


def test_old_events_are_upcast_and_the_chain_still_holds(tmp_path: Any) -> None:
    app = CoderApp(StoreConfig(backend="sqlite", path=tmp_path))
    old_topic = get_topic(OldNote)
    try:
        session = app.start_session(workspace="/w")
        app.update(session.id, lambda s: s.trigger_event(OldNote, text="written by v1"))
        # The code is upgraded: the old topic now resolves to the v2 class.
        clear_topic_cache()
        register_topic(old_topic, Note)
        app.repository.cache = None  # type: ignore[assignment]
        reloaded = app.get_session(session.id)
        reloaded.trigger_event(Note, text="written by v2", author="ada")
        app.save(reloaded)
        notes = app.session_events(session.id)[1:]
        assert [(type(n), n.text, n.author) for n in notes] == [
            (Note, "written by v1", "unknown"),
            (Note, "written by v2", "ada"),
        ]
        assert verify_session(app, str(session.id)).ok
    finally:
        clear_topic_cache()
        app.close()


def test_the_store_directory_keeps_itself_out_of_git(tmp_path: Any) -> None:
    import subprocess

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    app = CoderApp(StoreConfig(backend="sqlite", path=tmp_path / ".coder-es"))
    app.start_session(workspace=str(tmp_path))
    app.close()
    status = subprocess.run(
        ["git", "status", "--porcelain"], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert status.stdout == ""


def test_settings_changes_and_archiving_show_in_summaries_on_every_backend(
    store_config: StoreConfig,
) -> None:
    app = CoderApp(store_config)
    try:
        kept = app.start_session(workspace="/w", title="kept", agent="build", model="m1")
        gone = app.start_session(workspace="/w", title="gone")
        app.update(
            kept.id,
            lambda s: s.change_settings(
                agent="plan", provider="anthropic", model="m2", context_budget=1000
            ),
        )
        with pytest.raises(ValueError):
            kept.change_settings(agent="plan", provider="p", model="m", context_budget=0)
        assert app.archive_session(gone.id, by="user")
        assert not app.archive_session(gone.id, by="user")  # already archived: nothing recorded
        loaded = app.get_session(kept.id)
        assert (loaded.agent, loaded.provider, loaded.model) == ("plan", "anthropic", "m2")
        [summary] = app.list_sessions()
        assert (summary.title, summary.agent, summary.model) == ("kept", "plan", "m2")
        assert [s.title for s in app.list_sessions(archived=True)] == ["gone"]
        assert len(app.list_sessions(archived=None)) == 2
        # Archived is not removed: it resolves and loads, and comes back when restored.
        assert app.get_session(str(gone.id)[:8]).title == "gone"
        assert app.archive_session(gone.id, by="user", archived=False)
        assert {s.title for s in app.list_sessions()} == {"kept", "gone"}
        assert verify_session(app, str(gone.id)).ok and verify_session(app, str(kept.id)).ok
    finally:
        app.close()
