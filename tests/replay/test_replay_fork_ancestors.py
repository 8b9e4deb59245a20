"""A cassette of a forked session carries the sessions it was forked from (``ancestor`` lines),
and a replay puts them in its store before the session, where the agent loop reads the
conversation a forked session starts with."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from replay_helpers import NAMES, SESSIONS, record_session, text, tool

from coder_es.application import CoderApp
from coder_es.branching import Branching
from coder_es.providers.scripted import ScriptedProvider
from coder_es.redaction import Redactor
from coder_es.service.api import AgentService, SessionOptions
from replay.app import ReplayApp
from replay.cassette import (
    Cassette,
    CassetteError,
    dumps,
    event_blob_refs,
    export_session,
    load_cassette,
    loads,
)
from replay.engine import ReplayEngine, ReplayOptions, replay_cassette


def _turn(app: CoderApp, root: Path, sid: str, blocks: list[Any], message: str) -> None:
    provider = ScriptedProvider([{"blocks": blocks}])
    service = AgentService(app, root, provider_factory=lambda _n, _m: provider)

    async def go() -> None:
        handle = await service.open_session(sid, SessionOptions())
        async for _u in handle.send(message):
            pass
        await handle.close()

    asyncio.run(go())


def _fork(app: CoderApp, root: Path, sid: str) -> str:
    return Branching(app, root).fork(sid, None, new_session=True).session


def _family(root: Path) -> tuple[CoderApp, str, str]:
    """A parent session with one turn, a child forked at its last node with one turn, and a
    second turn of the parent after the fork (which the child never saw)."""
    app, parent = record_session(
        root,
        {"notes.md": "# notes\nthe answer is 42\n"},
        [[text("Reading."), tool("read", path="notes.md")], [text("It says 42.")]],
        "what do the notes say?",
    )
    child = _fork(app, root, parent)
    _turn(app, root, child, [text("You asked about the notes: 42.")], "what did I ask?")
    _turn(app, root, parent, [text("Nothing new.")], "anything else?")
    return app, parent, child


def _fork_node(app: CoderApp, sid: str) -> int:
    return int(str(app.get_session(sid).parent_node))


def _roundtrip(cassette: Cassette) -> Cassette:
    raw = dumps(cassette)
    again = loads(raw, "fork.cassette.jsonl")
    assert dumps(again) == raw
    return again


def test_a_forked_session_carries_its_parent_up_to_the_fork_and_replays(workspace: Path) -> None:
    app, parent, child = _family(workspace)
    node = _fork_node(app, child)
    parent_events = app.session_events(UUID(parent))
    assert len(parent_events) > node
    cassette = _roundtrip(export_session(app, child))
    app.close()

    [(sid, inherited)] = cassette.ancestors
    assert sid == parent
    assert [e.version for e in inherited] == list(range(1, node + 1))
    assert [e.kind for e in inherited] == [type(e).__name__ for e in parent_events[:node]]
    for e in inherited:
        for digest in event_blob_refs(e.kind, e.fields):
            assert digest is None or digest in cassette.blobs
    records = [json.loads(line) for line in dumps(cassette).splitlines()]
    kinds = [r["t"] for r in records]
    assert kinds[1 : node + 1] == ["ancestor"] * node and kinds[node + 1] == "event"
    assert records[0]["counts"]["ancestor_events"] == node
    # The ancestors' files are not the session's initial workspace.
    assert set(cassette.files) == {"notes.md"}

    app = ReplayApp()
    try:
        report = asyncio.run(ReplayEngine(cassette, app, ReplayOptions(mode="verify")).run())
        assert report.ok, report.render()
        # Only the session's own events are compared and counted.
        assert report.recorded_events == report.replayed_events == len(cassette.events)
        stored = app.session_events(UUID(parent))
        assert [(e.originator_version, type(e).__name__) for e in stored] == [
            (e.version, e.kind) for e in inherited
        ]
        assert app.get_session(parent).version == node
    finally:
        app.close()
    # The child's requests started with the parent's conversation: without its ancestors, the
    # replay cannot make the same request and says so.
    orphan = replace(cassette, ancestors=())
    report = replay_cassette(orphan, ReplayOptions(mode="verify"))
    assert not report.ok


def test_a_fork_of_a_fork_carries_both_ancestors_outermost_first(workspace: Path) -> None:
    app, parent, child = _family(workspace)
    grandchild = _fork(app, workspace, child)
    _turn(app, workspace, grandchild, [text("Still 42.")], "and now?")
    cassette = _roundtrip(export_session(app, grandchild))
    child_node, grandchild_node = _fork_node(app, child), _fork_node(app, grandchild)
    app.close()

    assert [sid for sid, _ in cassette.ancestors] == [parent, child]
    assert [len(events) for _, events in cassette.ancestors] == [child_node, grandchild_node]
    report = replay_cassette(cassette, ReplayOptions(mode="verify"))
    assert report.ok, report.render()


def test_ancestor_secrets_are_redacted_with_the_sessions_own(workspace: Path) -> None:
    secret = "tok-5e2b9c71d04a"
    app, parent = record_session(
        workspace,
        {"deploy.cfg": f"token = {secret}\n"},
        [[text("Reading."), tool("read", path="deploy.cfg")], [text("Read it.")]],
        "read deploy.cfg",
    )
    child = _fork(app, workspace, parent)
    _turn(app, workspace, child, [text("Done.")], "thanks")
    cassette = export_session(app, child, redactor=Redactor.from_environ({"DEPLOY_TOKEN": secret}))
    app.close()
    raw = dumps(cassette)
    assert secret not in raw and "[REDACTED:env:DEPLOY_TOKEN]" in raw
    reloaded = loads(raw, "redacted.cassette.jsonl")
    for _sid, events in reloaded.ancestors:
        for e in events:
            for digest in event_blob_refs(e.kind, e.fields):
                assert digest is None or digest in reloaded.blobs
    report = replay_cassette(reloaded, ReplayOptions(mode="verify"))
    assert report.ok, report.render()


def test_an_ancestor_the_store_does_not_have_is_left_out(workspace: Path) -> None:
    app = CoderApp()
    orphan = app.start_session(
        workspace=str(workspace),
        agent="coder",
        provider="scripted",
        model="scripted",
        title="orphan",
        parent_session="0b6c2f3e-5d1a-4c1e-9b7a-2f4e6d8c0a11",
        parent_node="3",
    )
    cassette = _roundtrip(export_session(app, str(orphan.id)))
    app.close()
    assert cassette.ancestors == ()
    assert "ancestor_events" not in json.loads(dumps(cassette).splitlines()[0])["counts"]


@pytest.mark.parametrize("name", NAMES)
def test_a_cassette_without_ancestors_reads_and_writes_as_before(name: str) -> None:
    path = SESSIONS / f"{name}.cassette.jsonl"
    cassette = load_cassette(path)
    assert cassette.ancestors == ()
    assert dumps(cassette) == path.read_text()


def _ancestor(**changes: Any) -> str:
    record: dict[str, Any] = {
        "t": "ancestor",
        "session": "0b6c2f3e-5d1a-4c1e-9b7a-2f4e6d8c0a11",
        "version": 1,
        "kind": "Started",
        "topic": "coder_es.domain.session:Session.Started",
        "timestamp": "2025-01-01T00:00:00+00:00",
        "fields": {},
    }
    record.update(changes)
    return json.dumps({k: v for k, v in record.items() if v is not None})


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (_ancestor(session="nope"), r"record 2: ancestor session 'nope' is not a session id"),
        (_ancestor(session=None), r"record 2 is malformed \(KeyError\('session'\)\)"),
        (_ancestor(version=2), r"record 2: event version 2 where 1 was expected"),
        (_ancestor(fields=[]), r"record 2: event fields must be an object"),
        (_ancestor(kind="UserMessageAdded"), r"ancestor session 0b6c2f3e-.* no Started event"),
    ],
)
def test_a_malformed_ancestor_line_is_named(tmp_path: Path, line: str, message: str) -> None:
    header, *rest = (SESSIONS / "fix-failing-test.cassette.jsonl").read_text().splitlines()
    path = tmp_path / "bad.cassette.jsonl"
    path.write_text("\n".join([header, line, *rest]) + "\n")
    with pytest.raises(CassetteError, match=message):
        load_cassette(path)
