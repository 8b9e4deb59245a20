"""coder-es search: what is found, what never is (sealed values), and that no query breaks it."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from backends import cli_store_args, make_config, requires_postgres
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from search_helpers import new_session, record_turn

from coder_es.application import CoderApp
from coder_es.cli import commands
from coder_es.cli.main import main
from coder_es.errors import UsageError
from coder_es.store.config import StoreConfig
from projections.search import (
    KINDS,
    Filters,
    Query,
    catch_up,
    documents,
    open_index,
    rebuild,
    search,
)
from projections.search.follow import SearchFeed
from projections.search.index import stored_blob
from projections.search.sqlite_index import SQLiteSearchIndex

FIXTURES = [HealthCheck.function_scoped_fixture]
GITHUB_TOKEN = "ghp_" + "R8mN2xQ5vB7cL1kJ4hG6fD9sA3zW0yT5uI8o"
HOSTILE = [
    '"',
    '""',
    "AND(",
    "OR",
    "NOT frob",
    "NEAR(frob broken, 2)",
    "frob*",
    "^frob",
    "text: frob",
    "a:b",
    "(frob",
    "frob)",
    "' OR 1=1 --",
    "-frob",
    "frob & !x | y <-> z",
    "\x00frob",
    "\x02frob\x03",
    "\udcff",
    "🔥 frob",
    '"unterminated phrase',
    "{frob}",
    "frob\\",
]


@pytest.fixture
def app(store_config: StoreConfig) -> Any:
    app = CoderApp(store_config)
    yield app
    app.close()


def _turns(app: CoderApp) -> Any:
    s = new_session(app, "frob session")
    record_turn(
        app,
        s,
        user="why is the frobnicator broken?",
        answer="Let me look at the frobnicator tests",
        command="pytest tests/test_spin.py",
        output_blob=b"collected 3 items\n" + b"." * 5000 + b"\nzanzibar deep inside the blob",
        changed=("src/frob/wheel.py",),
    )
    other = new_session(app, "other")
    record_turn(app, other, user="unrelated question about widgets", answer="widgets are fine")
    return s, other


def test_finds_each_kind_with_the_node_and_a_marked_snippet(app: CoderApp) -> None:
    s, other = _turns(app)
    index = open_index(app)
    try:
        user = search(app, index, "frobnicator", Filters(kind="user"))
        assert [(h.session, h.node, h.kind) for h in user] == [(str(s), "2", "user")]
        assert user[0].snippet[slice(*user[0].marks[0])].lower() == "frobnicator"
        assert [h.kind for h in search(app, index, "frobnicator tests")] == ["assistant"]
        tool_input = search(app, index, '"tests/test_spin.py"')
        assert [(h.kind, h.node) for h in tool_input] == [("tool", "3")]
        blob = search(app, index, "zanzibar")  # only in the blob: the event holds the start
        assert [(h.kind, h.node) for h in blob] == [("tool", "5")]
        assert "zanzibar" in blob[0].highlighted() and len(blob[0].snippet) < 300
        files = search(app, index, "wheel.py", Filters(kind="file"))
        assert [f.snippet for f in files] == ["src/frob/wheel.py"]
        assert [h.session for h in search(app, index, "widgets")] == [str(other)] * 2
        only = search(app, index, "widgets", Filters(session=str(s)))
        assert only == []
        assert search(app, index, "frobnicator", Filters(since=4102444800.0)) == []  # 2100
        assert len(search(app, index, "frobnicator", Filters(limit=1))) == 1
    finally:
        index.close()


def test_no_query_breaks_the_search(app: CoderApp) -> None:
    _turns(app)
    index = open_index(app)
    try:
        for query in HOSTILE:
            try:
                hits = search(app, index, query)
            except UsageError as e:  # nothing to search for: a clear message, exit 2
                assert "no words" in str(e)
                continue
            assert all(h.kind in KINDS for h in hits)
            if "frob" in query.lower() and query != "frob":
                assert query and all("frob" in h.highlighted().lower() for h in hits)
        # Operators are words like any other: "(frobnicator AND broken" is three words.
        assert [h.kind for h in search(app, index, "(frobnicator broken")] == ["user"]
    finally:
        index.close()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.text(max_size=40))
def test_any_text_is_a_valid_query(tmp_path: Path, text: str) -> None:
    app = CoderApp(StoreConfig("popo", tmp_path))
    index = open_index(app)
    try:
        record_turn(app, new_session(app), user="some words AND(more", answer='a "quote"')
        try:
            search(app, index, text)
        except UsageError:
            pass
    finally:
        index.close()
        app.close()


def test_sealed_values_are_never_indexed(app: CoderApp) -> None:
    s = new_session(app)
    record_turn(
        app,
        s,
        user=f"use the token {GITHUB_TOKEN} please",
        answer="ok",
        command=f"curl -H 'Authorization: token {GITHUB_TOKEN}' https://api.github.com",
        output_blob=b"x" * 200 + f"\nGITHUB_TOKEN={GITHUB_TOKEN}\n".encode(),
    )
    index = open_index(app)
    try:
        for piece in (GITHUB_TOKEN, GITHUB_TOKEN[4:], GITHUB_TOKEN[:12]):
            assert search(app, index, piece) == []
        assert not any(GITHUB_TOKEN[4:] in str(row) for row in index.rows())
        marked = search(app, index, "REDACTED")
        assert {h.kind for h in marked} == {"user", "tool"}
        assert len({h.node for h in marked}) == 3  # message, tool input, blob output
    finally:
        index.close()


def test_position_is_kept_and_only_new_events_are_read(persistent_store_config: Any) -> None:
    app = CoderApp(persistent_store_config)
    try:
        s, _ = _turns(app)
        index = open_index(app)
        first = catch_up(app, index)
        position = index.position
        index.close()
        assert first == position > 0
        index = open_index(app)
        assert index.position == position
        assert catch_up(app, index) == 0
        record_turn(app, s, user="a later frobnicator question", answer="later")
        assert catch_up(app, index) == 2
        assert len(search(app, index, "frobnicator", Filters(kind="user"))) == 2
        index.close()
    finally:
        app.close()


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    turns=st.lists(
        st.tuples(st.integers(0, 2), st.text(min_size=1, max_size=30), st.booleans()),
        min_size=1,
        max_size=8,
    )
)
def test_incremental_index_equals_a_rebuild(
    tmp_path_factory: Any, monkeypatch: pytest.MonkeyPatch, turns: Any
) -> None:
    """Catching up at arbitrary points, while the feed of the saves (projections.search.follow)
    indexes the same file from its thread, gives exactly the rows of one rebuild from zero
    (in blocks of 4 documents, so batches straddle them)."""
    from projections.search import sqlite_index

    monkeypatch.setattr(sqlite_index, "BLOCK", 4)
    config = StoreConfig("sqlite", tmp_path_factory.mktemp("store"))
    app = CoderApp(config)
    incremental = open_index(app)
    feed = SearchFeed(app, delay=0).attach()
    sessions = [new_session(app) for _ in range(3)]
    try:
        for which, text, check in turns:
            record_turn(app, sessions[which], user=text, answer=text[::-1], command=text)
            if check:
                catch_up(app, incremental, batch=3)
        feed.close()
        catch_up(app, incremental)
        incremental_rows = incremental.rows()
        rebuild(app, incremental)
        assert incremental.rows() == incremental_rows
    finally:
        incremental.close()
        app.close()


def test_cli_search_json_and_first_index_message(
    persistent_store_config: Any,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in persistent_store_config.extra.items():
        monkeypatch.setenv(name, value)  # the CLI reads the PostgreSQL settings from there
    app = CoderApp(persistent_store_config)
    s, _ = _turns(app)
    app.close()
    store = cli_store_args(persistent_store_config)
    assert main([*store, "search", "frobnicator", "--kind", "user", "--json"]) == 0
    out, err = capsys.readouterr()
    hits = [json.loads(line) for line in out.splitlines()]
    assert [(h["session"], h["node"], h["kind"]) for h in hits] == [(str(s), "2", "user")]
    assert set(hits[0]) >= {"snippet", "marks", "score", "timestamp"}
    assert err == ""  # quiet under --json, even on the first search
    assert main([*store, "search", "zanzibar", "--session", str(s)[:8]]) == 0
    out, err = capsys.readouterr()
    assert ">>zanzibar<<" in out and "tool" in out and "indexing" not in err


def test_cli_first_search_says_it_is_indexing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = StoreConfig("lmdb", tmp_path / "store")
    app = CoderApp(config)
    _turns(app)
    app.close()
    assert main([*cli_store_args(config), "search", "widgets"]) == 0
    out, err = capsys.readouterr()
    assert "indexing" in err and out.count("widgets") == 2
    assert (config.path / "search.sqlite").exists()


@pytest.mark.parametrize(
    "args", [["search", '"'], ["search", "x", "--since", "soon"], ["search", "x", "--limit", "0"]]
)
def test_cli_bad_input_is_a_usage_error(
    tmp_path: Path, args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    config = StoreConfig("lmdb", tmp_path / "store")
    CoderApp(config).close()
    assert main([*cli_store_args(config), *args]) == 2
    assert capsys.readouterr().err.startswith("coder-es: ")


def test_cli_kinds_match_the_index() -> None:
    assert commands.SEARCH_KINDS == KINDS


@requires_postgres
def test_projection_process_keeps_the_postgres_index(
    pg_schema: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``coder-es project --view search`` indexes what was appended; a search then reads no
    event again, and the view equals a rebuild from zero (--check)."""
    config = make_config("postgres", tmp_path, pg_schema)
    for name, value in config.extra.items():
        monkeypatch.setenv(name, value)
    app = CoderApp(config)
    try:
        s, _ = _turns(app)
        store = cli_store_args(config)
        project = [*store, "project", "--view", "search", "--until-caught-up", "--check"]
        assert main(project) == 0
        index = open_index(app)
        assert index.position == app.recorder.max_notification_id()
        assert catch_up(app, index) == 0
        record_turn(app, s, user="one more frobnicator", answer="noted")
        assert main(project) == 0
        assert catch_up(app, index) == 0
        assert len(search(app, index, "frobnicator", Filters(kind="user"))) == 2
        index.close()
    finally:
        app.close()


def test_a_damaged_index_file_is_rebuilt(tmp_path: Path) -> None:
    config = StoreConfig("lmdb", tmp_path / "store")
    app = CoderApp(config)
    try:
        _turns(app)
        (config.path / "search.sqlite").write_bytes(b"not a database at all" * 100)
        index = open_index(app)
        assert [h.kind for h in search(app, index, "frobnicator", Filters(kind="user"))] == ["user"]
        rows = index.rows()
        index.close()
        with sqlite3.connect(config.path / "search.sqlite") as conn:  # an index of another format
            conn.execute("UPDATE meta SET value = 999 WHERE key = 'format'")
        conn.close()
        index = open_index(app)
        assert index.position == 0 and index.rows() == []
        catch_up(app, index)
        assert index.rows() == rows
        index.close()
    finally:
        app.close()


def test_two_indexers_never_index_an_event_twice(tmp_path: Path) -> None:
    """A second process that read the log before the first committed skips what it added."""
    config = StoreConfig("sqlite", tmp_path / "store")
    app = CoderApp(config)
    try:
        _turns(app)
        one, two = open_index(app), open_index(app)
        notifications = app.recorder.select_notifications(start=1, limit=100)
        blob = stored_blob(app)
        entries = [(n.id, documents(app.mapper.to_domain_event(n), blob)) for n in notifications]
        assert one.add(entries[:4]) == 4
        assert two.add(entries) == len(entries) - 4  # the first four were already there
        assert two.add(entries) == 0
        reference = SQLiteSearchIndex(":memory:")
        reference.add(entries)
        assert one.rows() == reference.rows()
        for index in (one, two, reference):
            index.close()
    finally:
        app.close()


def test_ranking_window_widens_until_enough_hits(
    app: CoderApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a tiny window the newest documents are ranked first, and an old match is still found."""
    from projections.search import postgres_index, sqlite_index

    if app.config.backend == "postgres":
        monkeypatch.setattr(postgres_index, "WINDOW", 2)
    monkeypatch.setattr(sqlite_index, "WINDOW", 2)
    s = new_session(app)
    record_turn(app, s, user="an old aardvark", answer="noted")
    for i in range(6):
        record_turn(app, s, user=f"filler number {i} about otters", answer="otters again")
    index = open_index(app)
    try:
        old = search(app, index, "aardvark")
        assert [(h.kind, h.node) for h in old] == [("user", "2")]
        otters = search(app, index, "otters", Filters(limit=9))
        assert len(otters) == 9
        assert len(search(app, index, "otters", Filters(limit=50))) == 12
    finally:
        index.close()


def test_blocks_hold_the_same_documents_and_rank_the_newest_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index in blocks of 3 documents holds what one table does; a search ranks each block
    on its own, newest first, and still finds an old match."""
    from projections.search import sqlite_index

    app = CoderApp(StoreConfig("sqlite", tmp_path / "store"))
    try:
        s = new_session(app)
        record_turn(app, s, user="an old aardvark", answer="noted")
        for i in range(6):
            record_turn(app, s, user=f"filler number {i} about otters", answer="otters again")
        notifications = app.recorder.select_notifications(start=1, limit=100)
        blob = stored_blob(app)
        entries = [(n.id, documents(app.mapper.to_domain_event(n), blob)) for n in notifications]
        one, blocks = SQLiteSearchIndex(":memory:"), SQLiteSearchIndex(":memory:", block=3)
        one.add(entries)
        for at in range(0, len(entries), 4):
            blocks.add(entries[at : at + 4])
        assert blocks.rows() == one.rows()
        tables = blocks._conn.execute(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name GLOB 'block*' "
            "AND name NOT GLOB 'block*_*'"
        ).fetchone()[0]
        assert tables == (len(one.rows()) + 2) // 3 > 4
        old = blocks.search(Query.parse("aardvark"), Filters())
        assert [(h.kind, h.node) for h in old] == [("user", "2")]
        everything = blocks.search(Query.parse("otters"), Filters(limit=50))
        assert len(everything) == 12
        assert {(h.node, h.kind) for h in everything} == {
            (h.node, h.kind) for h in one.search(Query.parse("otters"), Filters(limit=50))
        }
        newest_first = {h.version for h in blocks.search(Query.parse("otters"), Filters(limit=4))}
        assert newest_first <= set(sorted((h.version for h in everything), reverse=True)[:5])
        monkeypatch.setattr(sqlite_index, "WINDOW", 1)
        assert len(blocks.search(Query.parse("otters"), Filters(limit=5))) == 5
        for index in (one, blocks):
            index.close()
        # An index written with another block size is rebuilt, like one of another format.
        path = tmp_path / "blocks.sqlite"
        SQLiteSearchIndex(path, block=3).add(entries)
        again = SQLiteSearchIndex(path, block=5)
        assert again.position == 0 and again.rows() == []
        again.close()
    finally:
        app.close()


def test_the_index_keeps_its_text_deflated_and_still_shows_snippets(tmp_path: Path) -> None:
    """Issue 36, item 6: FTS5's own copy of every document's text was two thirds of the index
    (500 one-line edits: 0.45 of 0.65 MB). The text is kept once, deflated, and FTS5 reads it
    through a view: snippets, filters and ``rows`` are as before."""
    import random

    from projections.search.documents import Doc

    rng = random.Random(7)
    words = ["def", "return", "self", "value", "index", "result", "items", "for", "in", "if"]
    docs = []
    for i in range(300):
        at = rng.randrange(2000)
        hunk = "\n".join(f" x{at + k:05d} " + " ".join(rng.choices(words, k=7)) for k in range(6))
        text = f"edit\nEdited big.py\n--- a/big.py\n+++ b/big.py\n@@ -{at},7 +{at},7 @@\n{hunk}\n"
        if i == 123:
            text += "+x99999 edited aardvark\n"
        docs.append(Doc("s1" if i % 2 else "s2", i + 1, str(i + 1), "tool", 1000.0 + i, text))
    path = tmp_path / "search.sqlite"
    index = SQLiteSearchIndex(path)
    try:
        index.add([(i + 1, [d]) for i, d in enumerate(docs)])
        tables = {
            name
            for (name,) in index._conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
        assert "block0_content" not in tables  # no second copy kept by FTS5
        stored = index._conn.execute("SELECT sum(length(data)) FROM chunks").fetchone()[0]
        plain = sum(len(d.text.encode()) for d in docs)
        assert stored < 0.6 * plain, (stored, plain)
        (hit,) = index.search(Query.parse("aardvark"), Filters())
        assert (hit.session, hit.version, hit.kind) == ("s1", 124, "tool")
        assert "aardvark" in hit.snippet and hit.marks
        assert len(index.search(Query.parse("aardvark"), Filters(session="s2", limit=500))) == 0
        assert len(index.search(Query.parse("aardvark"), Filters(session="s1", limit=500))) == 1
        assert len(index.search(Query.parse("big"), Filters(session="s1", limit=500))) == 150
        rows = index.rows()
        assert len(rows) == 300 and {r[5] for r in rows} == {d.text for d in docs}
    finally:
        index.close()
    reopened = SQLiteSearchIndex(path)  # another connection reads the deflated text too
    try:
        assert "aardvark" in reopened.search(Query.parse("aardvark"), Filters())[0].snippet
    finally:
        reopened.close()
