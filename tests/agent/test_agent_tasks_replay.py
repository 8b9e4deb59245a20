"""Live replay of a session whose model started subagents: the children run again."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from agent_helpers import Harness, collect, text, tool, turn

from coder_es.agent import updates as up
from coder_es.permissions.rules import Rule
from coder_es.providers.scripted import ScriptedProvider
from coder_es.service.api import AgentService, SessionOptions
from replay.cassette import (
    Cassette,
    dumps,
    export_session,
    load_cassette,
    loads,
    write_cassette,
)
from replay.engine import ReplayOptions, replay_cassette

FIXED = "def add(a, b):\n    return a + b\n"


def task(id: str, prompt: str, agent: str = "general") -> dict[str, Any]:
    return tool("task", id, description=f"do {id}", prompt=prompt, agent=agent)


def record(h: Harness, scripts: list[list[dict[str, Any]]], message: str) -> str:
    """The parent gets the first script, each child the next one, in the order they start."""
    queue = list(scripts)

    def factory(_name: str, _model: str) -> ScriptedProvider:
        return ScriptedProvider(queue.pop(0), model="scripted-test")

    service = AgentService(h.app, h.root, provider_factory=factory)
    handle = asyncio.run(service.create_session(SessionOptions(agent="build")))
    collect(handle, message)
    return handle.id


def two_tasks(h: Harness) -> str:
    """A parent whose one response starts two tasks: t1's child reads and fixes src/calc.py
    (slowly: in the recording t2 finished first), t2's child reads the README."""
    parent = [turn(task("t1", "fix add"), task("t2", "what is this?")), turn(text("all done"))]
    fixer = [
        turn(tool("read", "r1", path="src/calc.py"), delay_ms=150),
        turn(
            tool(
                "edit",
                "e1",
                path="src/calc.py",
                old_string="return a - b\n\n\n",
                new_string="return a + b\n\n\n",
            )
        ),
        turn(text("add fixed")),
    ]
    reader = [turn(tool("read", "r2", path="README.md")), turn(text("a demo"))]
    return record(h, [parent, fixer, reader], "fix add and tell me what this is")


def cassette_of(h: Harness, session: str) -> Cassette:
    return loads(dumps(export_session(h.app, session)), "parent")


def files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }


def with_child_events(cassette: Cassette, index: int, change: Any) -> Cassette:
    call, child = cassette.children[index]
    changed = dataclasses.replace(child, events=tuple(change(e) for e in child.events))
    children = list(cassette.children)
    children[index] = (call, changed)
    return dataclasses.replace(cassette, children=tuple(children))


def test_live_replay_runs_both_children_again(h: Harness, tmp_path: Path) -> None:
    session = two_tasks(h)
    recorded_files = files(h.root)
    assert recorded_files["src/calc.py"].decode().startswith(FIXED)
    cassette = cassette_of(h, session)
    (t1, fixer), (t2, _reader) = cassette.children
    assert (t1, t2) == ("t1", "t2")
    # The fixer's edit was asked and allowed: the live replay answers it from its recording.
    assert [e.kind for e in fixer.events].count("PermissionDecided") == 2
    for run in range(3):  # the two children overlap; the outcome must not depend on it
        scratch = tmp_path / f"scratch{run}"
        report = replay_cassette(cassette, ReplayOptions(mode="live", workspace=scratch))
        assert report.ok, report.divergence
        assert report.model_calls == 2 + 3 + 2  # the parent's and each child's, served
        assert report.tool_calls == 2 + 2 + 1  # the tasks, then the children's tools, run
        # The scratch workspace started from the recorded initial files: the fix is the
        # child's edit, made again.
        assert files(scratch) == recorded_files


def other_readme(e: Any) -> Any:
    """The reader's recorded read result, as if the README had said something else."""
    if e.kind == "ToolCallCompleted":
        return dataclasses.replace(e, fields={**e.fields, "output": "1\t# Something else"})
    return e


def test_a_tampered_child_recording_is_reported_with_the_childs_path(h: Harness) -> None:
    session = two_tasks(h)
    cassette = cassette_of(h, session)
    reader = cassette.children[1][1]
    report = replay_cassette(with_child_events(cassette, 1, other_readme), ReplayOptions("live"))
    assert report.divergence is not None
    summary = report.divergence.summary
    assert summary.startswith(f"in subagent {reader.session} (task t2): ")
    assert "fields.output differs: recorded '1 # Something else', replayed '1 # Demo'" in summary
    assert report.divergence.kind == "ToolCallCompleted"


def test_a_child_whose_recorded_request_differs_is_reported(h: Harness) -> None:
    session = two_tasks(h)
    cassette = cassette_of(h, session)
    fixer = cassette.children[0][1]

    def other_prompt(e: Any) -> Any:
        if e.kind == "UserMessageAdded":
            content = [{"type": "text", "text": "fix sub"}]
            return dataclasses.replace(e, fields={**e.fields, "content": content})
        return e

    report = replay_cassette(with_child_events(cassette, 0, other_prompt), ReplayOptions("live"))
    assert report.divergence is not None
    assert report.divergence.summary.startswith(f"in subagent {fixer.session} (task t1): ")
    assert report.divergence.kind == "UserMessageAdded"


def test_a_child_missing_from_the_cassette_is_a_divergence(h: Harness) -> None:
    session = two_tasks(h)
    cassette = cassette_of(h, session)
    report = replay_cassette(
        dataclasses.replace(cassette, children=cassette.children[1:]), ReplayOptions("live")
    )
    assert report.divergence is not None
    assert "the current code starts a subagent for task (t1)" in report.divergence.summary
    assert "has no cassette of its subagent" in report.divergence.summary


def test_record_cassette_then_replay_live_on_the_command_line(
    h: Harness, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from coder_es.cli.main import main

    session = two_tasks(h)
    h.app.close()
    store = ["--backend", "sqlite", "--store", str(tmp_path / "store")]
    out = tmp_path / "tasks.cassette.jsonl"
    assert (
        main([*store, "--workspace", str(h.root), "record-cassette", session, "-o", str(out)]) == 0
    )
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["tool_use_id"] for line in lines if line.get("t") == "child"] == ["t1", "t2"]
    capsys.readouterr()
    assert main([*store, "replay", str(out), "--mode", "live", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and (report["model_calls"], report["tool_calls"]) == (7, 5)
    # A child whose recording no longer matches: exit 1, named with the child's path.
    cassette = load_cassette(out)
    write_cassette(with_child_events(cassette, 1, other_readme), out)
    assert main([*store, "replay", str(out), "--mode", "live"]) == 1
    shown = capsys.readouterr().out
    reader = cassette.children[1][1].session
    assert f"DIVERGED (live mode) in subagent {reader} (task t2): step " in shown


@pytest.mark.parametrize("long_first", [True, False])
def test_a_turn_cancelled_while_children_ran_replays_in_both_modes(
    h: Harness, long_first: bool
) -> None:
    """The user cancelled the parent while one child waited on its model and the other had
    finished: the replay cancels at the same point, whichever child gets there first."""
    long, quick = task("t1", "take long"), task("t2", "quick")
    parent = [turn(long, quick) if long_first else turn(quick, long)]
    waits = [turn(text("never seen"), delay_ms=5000)]
    reads = [turn(tool("read", "r2", path="README.md")), turn(text("a demo"))]
    queue = [parent, waits, reads] if long_first else [parent, reads, waits]

    def factory(_name: str, _model: str) -> ScriptedProvider:
        return ScriptedProvider(queue.pop(0), model="scripted-test")

    service = AgentService(h.app, h.root, provider_factory=factory)
    handle = asyncio.run(service.create_session(SessionOptions(agent="build")))

    async def cancel(handle: Any, update: up.Update) -> None:
        if isinstance(update, up.ToolStarted) and update.name == "task":
            await asyncio.sleep(0.3)
            handle.cancel()

    collect(handle, "go", on_update=cancel)
    cassette = cassette_of(h, handle.id)
    completed = {
        e.fields["tool_use_id"]: e.fields for e in cassette.events if e.kind == "ToolCallCompleted"
    }
    assert "Interrupted" in completed["t1"]["output"]
    # The quick child's result was recorded only if the parent got to it before the cancel.
    assert ("Interrupted" in completed["t2"]["output"]) == long_first
    kinds = {call: [e.kind for e in c.events] for call, c in cassette.children}
    assert kinds["t1"][-1] == "TurnCancelled" and kinds["t2"][-1] == "ModelResponded"
    for mode in ("verify", "live"):
        report = replay_cassette(cassette, ReplayOptions(mode=mode))
        assert report.ok, (mode, report.divergence)
    live = replay_cassette(cassette, ReplayOptions(mode="live"))
    assert (live.model_calls, live.tool_calls) == (1 + 0 + 2, 2 + 1)


def test_a_command_cancelled_mid_run_replays_in_both_modes(h: Harness) -> None:
    """Without subagents: a turn cancelled while a command ran replays to the same closing."""
    parent = [turn(tool("bash", "b1", command="sleep 5"))]
    handle = asyncio.run(
        AgentService(
            h.app, h.root, provider_factory=lambda _n, _m: ScriptedProvider(parent)
        ).create_session(SessionOptions(agent="build"))
    )

    async def cancel(handle: Any, update: up.Update) -> None:
        if isinstance(update, up.ToolStarted):
            await asyncio.sleep(0.3)
            handle.cancel()

    collect(handle, "wait", on_update=cancel)
    cassette = cassette_of(h, handle.id)
    assert [e.kind for e in cassette.events][-2:] == ["TurnCancelled", "ToolCallCompleted"]
    for mode in ("verify", "live"):
        report = replay_cassette(cassette, ReplayOptions(mode=mode))
        assert report.ok, (mode, report.divergence)


def test_a_child_session_continued_later_replays_its_task_and_says_so(h: Harness) -> None:
    session = two_tasks(h)
    reader = next(e.child_session for e in h.of(session, "TaskStarted") if e.tool_use_id == "t2")
    later = [turn(text("still a demo"))]
    service = AgentService(h.app, h.root, provider_factory=lambda _n, _m: ScriptedProvider(later))
    collect(asyncio.run(service.open_session(reader)), "and now?")
    cassette = cassette_of(h, session)
    report = replay_cassette(cassette, ReplayOptions(mode="live"))
    assert report.ok, report.divergence
    (note,) = report.notes
    # Opened with the default agent (build), the explore child first records that change.
    assert note.startswith(f"subagent {reader} (task t2): its events from step 9 (SettingsChanged)")
    # Verify mode replays the whole child session from its cassette, the later turn included.
    assert replay_cassette(cassette, ReplayOptions(mode="verify")).ok


def test_a_turn_cancelled_on_a_childs_question_replays_in_both_modes(h: Harness) -> None:
    """The user cancelled while one child's question was open and the other child waited to
    ask its own: both children's recordings end in the question and the cancellation."""
    parent = [turn(task("t1", "write a"), task("t2", "write b"))]
    one = [turn(tool("write", "w1", path="a.txt", content="a")), turn(text("x"))]
    two = [turn(tool("write", "w2", path="b.txt", content="b")), turn(text("y"))]
    queue = [parent, one, two]

    def factory(_name: str, _model: str) -> ScriptedProvider:
        return ScriptedProvider(queue.pop(0), model="scripted-test")

    service = AgentService(h.app, h.root, provider_factory=factory)
    options = SessionOptions(agent="build", rules=(Rule("write", None, "ask"),))
    handle = asyncio.run(service.create_session(options))

    async def cancel(handle: Any, update: up.Update) -> None:
        if isinstance(update, up.PermissionRequired):
            await asyncio.sleep(0.3)
            handle.cancel()

    collect(handle, "go", yes=None, on_update=cancel)
    cassette = cassette_of(h, handle.id)
    for _call, child in cassette.children:
        kinds = [e.kind for e in child.events]
        assert kinds[-3:] == ["PermissionRequested", "TurnCancelled", "ToolCallCompleted"]
    for mode in ("verify", "live"):
        report = replay_cassette(cassette, ReplayOptions(mode=mode))
        assert report.ok, (mode, report.divergence)
    assert not (h.root / "a.txt").exists() and not (h.root / "b.txt").exists()
