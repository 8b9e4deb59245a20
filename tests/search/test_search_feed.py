"""The search index kept as a process records (issue 22.1): after a `run` the index already
holds the session's events, without a search having run; a failing index never fails a turn."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from search_helpers import new_session, record_turn

from coder_es.application import CoderApp
from coder_es.cli.main import main
from coder_es.store.config import StoreConfig
from projections.search import Filters, Query, catch_up, open_index, rebuild
from projections.search.follow import SearchFeed
from projections.search.sqlite_index import SQLiteSearchIndex

SCRIPT = {
    "turns": [
        {
            "blocks": [
                {"type": "text", "text": "looking at the quixotic notes"},
                {"type": "tool_use", "name": "read", "input": {"path": "notes.md"}},
            ]
        },
        {"blocks": [{"type": "text", "text": "the notes mention a marmoset"}]},
    ]
}


def _run(tmp_path: Path, backend: str, prompt: str) -> tuple[int, str]:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    (workspace / "notes.md").write_text("a marmoset lives here\n")
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    store = ["--backend", backend, "--store", str(tmp_path / "store")]
    args = ["--workspace", str(workspace), *store, "run", prompt]
    return main([*args, "--provider", "scripted", "--script", str(script), "--json"]), str(
        tmp_path / "store"
    )


@pytest.mark.parametrize("backend", ["lmdb", "sqlite"])
def test_after_a_run_the_index_already_holds_the_session(
    tmp_path: Path, backend: str, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    for var in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "CODER_ES_SCRIPT", "CODER_ES_PROVIDER"):
        monkeypatch.delenv(var, raising=False)
    code, store = _run(tmp_path, backend, "why is the zeppelin late?")
    assert code == 0, capsys.readouterr().err
    sid = json.loads(capsys.readouterr().out.splitlines()[0])["session_id"]
    path = Path(store) / "search.sqlite"
    assert path.exists()  # no search ran: the run itself indexed its events
    app = CoderApp(StoreConfig(backend, Path(store)))
    index = SQLiteSearchIndex(path)
    try:
        assert index.position == app.recorder.max_notification_id()
        kinds = {(row[0], row[3]) for row in index.rows()}
        assert {(sid, "user"), (sid, "assistant"), (sid, "tool")} <= kinds
        found = index.search(Query.parse("zeppelin"), Filters())
        assert [(h.session, h.kind) for h in found] == [(sid, "user")]
        # Indexed as it was appended == rebuilt from zero.
        incremental = index.rows()
        rebuild(app, index)
        assert index.rows() == incremental
    finally:
        index.close()
        app.close()
    # The first search reads nothing more and says nothing about indexing.
    assert main(["--backend", backend, "--store", store, "search", "marmoset"]) == 0
    out, err = capsys.readouterr()
    assert "marmoset" in out and "indexing" not in err


def test_a_failing_index_never_fails_the_run_and_is_reported_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    for var in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "CODER_ES_SCRIPT", "CODER_ES_PROVIDER"):
        monkeypatch.delenv(var, raising=False)
    (tmp_path / "store" / "search.sqlite").mkdir(parents=True)  # cannot be opened as a database
    code, _ = _run(tmp_path, "lmdb", "why is the zeppelin late?")
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out.splitlines()[0])["session_id"]
    assert err.count("the search index was not updated") == 1, err


def test_feed_indexes_each_event_once_beside_other_indexers(tmp_path: Path) -> None:
    """The feed's thread and a search catching up in this thread write the same index, and
    events the feed was not handed come in between: every event is there once, as in a rebuild,
    and the feed stops at close."""
    app = CoderApp(StoreConfig("sqlite", tmp_path / "store"))
    feed = SearchFeed(app, delay=0).attach()
    other = open_index(app)
    try:
        sessions = [new_session(app) for _ in range(3)]
        for i in range(30):
            if i % 10 == 5:  # events the feed is not handed (another process's): a gap
                app.save_observers.remove(feed.saved)
                record_turn(app, sessions[i % 3], user=f"turn {i} ocelot", answer=f"unfed {i}")
                app.save_observers.append(feed.saved)
                continue
            record_turn(app, sessions[i % 3], user=f"turn {i} ocelot", answer=f"answer {i}")
            if i % 7 == 0:
                catch_up(app, other, batch=2)
        feed.close()
        assert feed.saved not in app.save_observers
        assert other.position == app.recorder.max_notification_id()
        assert feed.indexed > 0
        rows = other.rows()
        assert len([r for r in rows if r[3] == "user"]) == 30
        rebuild(app, other)
        assert other.rows() == rows
        record_turn(app, sessions[0], user="after the close", answer="not fed")
        assert other.position < app.recorder.max_notification_id()
    finally:
        other.close()
        app.close()


def test_a_feed_started_before_the_first_save_opens_the_index_then_indexes_the_save(
    tmp_path: Path,
) -> None:
    """``start`` (``run --harness`` while its harness starts up) creates the index before any
    save, so the save's indexing is all that is left for ``close``; what is saved is indexed as
    when the feed starts at the save, and a feed started but never fed stops at close."""
    app = CoderApp(StoreConfig("lmdb", tmp_path / "store"))
    index_file = tmp_path / "store" / "search.sqlite"
    try:
        idle = SearchFeed(app, delay=0).attach().start()
        for _ in range(200):  # its thread creates the index
            if index_file.exists():
                break
            time.sleep(0.01)
        assert index_file.exists()
        idle.close()
        assert idle.indexed == 0 and idle.saved not in app.save_observers
        feed = SearchFeed(app, delay=0).attach().start()
        sid = new_session(app)
        record_turn(app, sid, user="where is the okapi?", answer="behind the baobab")
        feed.close()
        index = open_index(app)
        try:
            assert index.position == app.recorder.max_notification_id()
            found = index.search(Query.parse("okapi"), Filters())
            assert [(h.session, h.kind) for h in found] == [(str(sid), "user")]
        finally:
            index.close()
    finally:
        app.close()


def test_a_large_backlog_is_left_to_the_first_search(tmp_path: Path) -> None:
    app = CoderApp(StoreConfig("lmdb", tmp_path / "store"))
    try:
        s = new_session(app)
        for i in range(5):
            record_turn(app, s, user=f"old turn {i}", answer="old")
        feed = SearchFeed(app, delay=0, max_backlog=5).attach()
        record_turn(app, s, user="a new turn", answer="new")
        feed.close()
        index = open_index(app)
        assert index.position == 0 and feed.indexed == 0 and not feed.failed
        index.close()
    finally:
        app.close()
