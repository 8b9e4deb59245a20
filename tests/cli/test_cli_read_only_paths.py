"""Issue 35: ``pending`` and ``search`` read an index that is up to date without building the
application (``Context.reader``: the recorder and the view store alone), and print exactly what
the application's path prints; with something new in the log they take the application's path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from cli_helpers import Cli, Result, subprocess_env

from coder_es.application import CoderApp
from coder_es.service.waiting import pending, pending_read_only
from coder_es.service.waiting_index import rebuild
from coder_es.store.config import StoreConfig
from projections.search.index import INDEX_FILE

PROBE = """
import json, sys
from coder_es.cli.main import main
code = main(sys.argv[1:])
sys.stdout.flush()
print(json.dumps({"code": code, "app": "coder_es.application" in sys.modules}), file=sys.stderr)
"""


def probe(repo: Path, *args: str) -> tuple[Result, bool]:
    """The command as a process: its result and whether it built the application."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        cwd=repo,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    *err, last = done.stderr.strip().splitlines()
    report = json.loads(last)
    return Result(report["code"], done.stdout, "\n".join(err)), report["app"]


def _parked(repo: Path, cli: Cli, name: str, path: str) -> str:
    calls = [
        {"type": "tool_use", "id": name, "name": "write", "input": {"path": path, "content": "x\n"}}
    ]
    turns = [{"blocks": calls}, {"blocks": [{"type": "text", "text": "done"}]}]
    script = repo.parent / f"{name}.json"
    script.write_text(json.dumps({"turns": turns}))
    r = cli("run", f"write {path}", "--script", str(script), "--defer", "--json")
    assert r.code == 3, r.err
    sid: str = r.json_lines()[0]["session_id"]
    return sid


def test_pending_on_an_up_to_date_index_is_the_applications_answer(repo: Path, cli: Cli) -> None:
    first = _parked(repo, cli, "w1", str(repo.parent / "outside-1.txt"))
    _parked(repo, cli, "w2", str(repo.parent / "outside-2.txt"))
    for args in (["pending"], ["pending", "--json"]):
        _forget_waiting_index(repo)
        folded, built = probe(repo, *args)  # the first read folds the parked sessions
        assert (folded.code, built) == (0, True), folded.err
        again, built = probe(repo, *args)
        assert (again.code, built) == (0, False), again.err
        assert again.out == folded.out
    assert len(again.out.splitlines()) == 2

    # An answer is new in the log: the next read folds that session again, then reads alone.
    assert cli("approve", first[:8], "w1").code == 0
    after, built = probe(repo, "pending", "--json")
    assert built and [q["call"] for q in map(json.loads, after.out.splitlines())] == ["w2"]
    again, built = probe(repo, "pending", "--json")
    assert (again.out, built) == (after.out, False)

    app = CoderApp(StoreConfig("sqlite", repo.parent / "store"))
    try:
        assert pending_read_only(app.views, app.recorder) == pending(app)
    finally:
        app.close()


def _forget_waiting_index(repo: Path) -> None:
    app = CoderApp(StoreConfig("sqlite", repo.parent / "store"))
    try:
        rebuild(app)
    finally:
        app.close()


def _search_lines(result: Result) -> list[Any]:
    return [json.loads(line) for line in result.out.splitlines()]


def test_search_on_an_up_to_date_index_is_the_applications_answer(repo: Path, cli: Cli) -> None:
    _parked(repo, cli, "w1", str(repo.parent / "notes-alpha.txt"))
    queries = (["alpha"], ["write", "--kind", "user"], ["alpha", "--json"], ["nothing-like-it"])
    for query in queries:
        (repo.parent / "store" / INDEX_FILE).unlink(missing_ok=True)
        indexed, built = probe(repo, "search", *query)  # the first search indexes the log
        assert (indexed.code, built) == (0, True), indexed.err
        again, built = probe(repo, "search", *query)
        assert (again.code, built) == (0, False), again.err
        # The first search also said it was indexing the log.
        said = [line for line in indexed.err.splitlines() if not line.startswith("indexing ")]
        assert (again.out, again.err.splitlines()) == (indexed.out, said)
    assert "no matches" in again.err
    found, _ = probe(repo, "search", "alpha", "--json")
    assert {hit["kind"] for hit in _search_lines(found)} >= {"user"}
    # A session filter is resolved by the application.
    sid = cli("sessions", "--json").json_lines()[0]["id"]
    scoped, built = probe(repo, "search", "alpha", "--session", sid[:8], "--json")
    assert built and scoped.out == found.out
    # A query without words is refused the same way on both paths.
    empty, built = probe(repo, "search", '""')
    assert (empty.code, built) == (2, False) and "no words" in empty.err


def test_the_waiting_indexs_topics_name_the_session_events_it_follows() -> None:
    from eventsourcing.utils import get_topic

    from coder_es.domain.session import Session
    from coder_es.service import waiting_index

    kinds = (
        Session.PermissionDeferred, Session.TurnParked, Session.CallScheduled,
        Session.DeferredAnswered, Session.PermissionDecided, Session.ToolCallCompleted,
        Session.TurnResumed, Session.TurnCancelled, Session.UserMessageAdded,
        Session.ModelResponded, Session.ContextCompacted, Session.HeadMoved,
    )  # fmt: skip
    assert tuple(get_topic(k) for k in kinds) == waiting_index.TOUCHING
    parking = {get_topic(Session.PermissionDeferred), get_topic(Session.TurnParked)}
    assert parking == waiting_index._PARKING
