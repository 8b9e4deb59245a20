"""The ``task`` tool: subagents as child sessions forked from the parent."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import time
from collections.abc import Awaitable, Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from agent_helpers import Harness, collect, text, tool, turn

from coder_es.agent import updates as up
from coder_es.branching import Branching
from coder_es.permissions.policy import PermissionAnswer
from coder_es.permissions.rules import Rule
from coder_es.providers.scripted import ScriptedProvider
from coder_es.service.api import AgentService, SessionHandle, SessionOptions

Sleep = Callable[[float], Awaitable[None]]


def service(
    h: Harness, scripts: list[list[dict[str, Any]]], sleep: Sleep = asyncio.sleep
) -> AgentService:
    """The parent gets the first script, each child the next one, in the order they start."""
    queue = list(scripts)

    def factory(_name: str, _model: str) -> ScriptedProvider:
        provider = ScriptedProvider(queue.pop(0), model="scripted-test", sleep=sleep)
        h.providers.append(provider)
        return provider

    return AgentService(h.app, h.root, provider_factory=factory)


def start(h: Harness, scripts: list[list[dict[str, Any]]], *rules: Rule, **kw: Any) -> Any:
    options = SessionOptions(agent="build", rules=tuple(rules))
    return asyncio.run(service(h, scripts, **kw).create_session(options))


def task(id: str, prompt: str, agent: str = "general") -> dict[str, Any]:
    return tool("task", id, description=f"do {id}", prompt=prompt, agent=agent)


def children(h: Harness, handle: SessionHandle | str) -> dict[str, str]:
    return {e.tool_use_id: e.child_session for e in h.of(handle, "TaskStarted")}


def test_two_tasks_at_once_overlap_and_answer_in_call_order(h: Harness) -> None:
    parent = [turn(task("t1", "look at A"), task("t2", "look at B")), turn(text("both done"))]
    slow = {"delay_ms": 400}
    child_a = [turn(text("A is fine"), **slow)]
    child_b = [turn(text("B is broken"), **slow)]
    handle = start(h, [parent, child_a, child_b])
    t0 = time.monotonic()
    updates = collect(handle, "check A and B")
    elapsed = time.monotonic() - t0
    assert isinstance(updates[-1], up.TurnEnded) and updates[-1].reason == "end_turn"
    kids = children(h, handle)
    assert set(kids) == {"t1", "t2"}
    # They ran side by side: each child's run overlaps the other's.
    spans = {}
    for call, sid in kids.items():
        events = h.events(sid)
        spans[call] = (events[0].timestamp, events[-1].timestamp)
    assert spans["t1"][0] < spans["t2"][1] and spans["t2"][0] < spans["t1"][1]
    assert elapsed < 0.8 + 0.7  # two 0.4 s children, not one after the other plus overhead
    completed = h.of(handle, "ToolCallCompleted")
    assert [(e.tool_use_id, e.output) for e in completed] == [
        ("t1", "A is fine"),
        ("t2", "B is broken"),
    ]
    meta = {u.tool_use_id: u.metadata for u in updates if isinstance(u, up.ToolCompleted)}
    assert meta["t1"] == {"child_session": kids["t1"], "agent": "general"}
    # The child is a fork: nothing copied, its Started names the parent, the node and the call.
    response = h.of(handle, "ModelResponded")[0]
    started = h.events(kids["t2"])[0]
    assert started.parent_session == handle.id
    assert started.parent_node == response.parent  # the node the model answered
    assert started.settings["task"]["tool_use_id"] == "t2"
    # The child's model saw the parent's conversation, then the task's prompt.
    child_request = h.providers[2].requests[0]
    users = [m for m in child_request.messages if m["role"] == "user"]
    assert "check A and B" in str(users[0]) and "look at B" in str(users[-1])


def test_explore_child_is_read_only_and_general_has_no_task(h: Harness) -> None:
    parent = [turn(task("t1", "find things", agent="explore")), turn(text("ok"))]
    child = [turn(tool("write", "w1", path="new.txt", content="x")), turn(text("could not"))]
    handle = start(h, [parent, child])
    collect(handle, "explore")
    kid = children(h, handle)["t1"]
    offered = [t["name"] for t in h.providers[1].requests[0].tools]
    assert offered == ["read", "grep", "find"]
    result = next(e for e in h.of(kid, "ToolCallCompleted") if e.tool_use_id == "w1")
    assert result.is_error and "Unknown tool 'write'" in result.output
    assert not (h.root / "new.txt").exists()


def test_child_edit_merges_with_the_user_and_rewind_restores_it(h: Harness) -> None:
    calc = h.root / "src/calc.py"

    async def user_edits_meanwhile(seconds: float) -> None:
        # The user changes another part of the file while the child's model is thinking.
        calc.write_text(calc.read_text().replace("def sub(a, b):", "def sub(a, b):  # user"))
        await asyncio.sleep(seconds)

    parent = [turn(task("t1", "fix add")), turn(text("fixed"))]
    child = [
        turn(tool("read", "r1", path="src/calc.py")),
        turn(
            tool(
                "edit",
                "e1",
                path="src/calc.py",
                old_string="return a - b\n\n\n",
                new_string="return a + b\n\n\n",
            ),
            delay_ms=10,
        ),
        turn(text("add fixed")),
    ]
    handle = start(h, [parent, child], sleep=user_edits_meanwhile)
    collect(handle, "fix add")
    merged = calc.read_text()
    assert "return a + b" in merged and "# user" in merged  # both kept
    completed = next(e for e in h.of(handle, "ToolCallCompleted") if e.tool_use_id == "t1")
    assert [c["path"] for c in completed.files_changed] == ["src/calc.py"]
    # Rewinding the parent to before the task call takes back what the child did, and only it.
    user_node = h.of(handle, "UserMessageAdded")[0].originator_version
    Branching(h.app, h.root).rewind(handle.id, str(user_node))
    after = calc.read_text()
    assert "return a + b" not in after and "# user" in after


def test_child_permission_question_reaches_the_user_labelled(h: Harness) -> None:
    parent = [turn(task("t1", "write a note")), turn(text("done"))]
    child = [turn(tool("write", "w1", path="note.txt", content="hi\n")), turn(text("wrote it"))]
    handle = start(h, [parent, child], Rule("write", None, "ask"))
    asked: list[up.PermissionRequired] = []

    async def answer(handle: SessionHandle, update: up.Update) -> None:
        if isinstance(update, up.PermissionRequired):
            asked.append(update)
            await handle.answer(update.tool_use_id, PermissionAnswer.allow_once("user"))

    collect(handle, "note", yes=None, on_update=answer)
    kid = children(h, handle)["t1"]
    assert [(q.tool, q.session) for q in asked] == [("write", kid)]
    assert (h.root / "note.txt").read_text() == "hi\n"
    decided = h.of(kid, "PermissionDecided")
    assert [(d.decision, d.decided_by) for d in decided] == [("allow", "user")]


def test_cancelling_the_parent_cancels_the_child(h: Harness) -> None:
    parent = [turn(task("t1", "take long"))]
    child = [turn(text("never seen"), delay_ms=5000)]
    handle = start(h, [parent, child])

    async def cancel(handle: SessionHandle, update: up.Update) -> None:
        if isinstance(update, up.ToolStarted) and update.name == "task":
            await asyncio.sleep(0.3)
            handle.cancel()

    t0 = time.monotonic()
    updates = collect(handle, "go", on_update=cancel)
    assert time.monotonic() - t0 < 4
    assert updates[-1].reason == "cancelled"  # type: ignore[attr-defined]
    kid = children(h, handle)["t1"]
    (child_cancel,) = h.of(kid, "TurnCancelled")
    assert "parent" in child_cancel.reason
    result = next(e for e in h.of(handle, "ToolCallCompleted") if e.tool_use_id == "t1")
    assert result.is_error and "Interrupted" in result.output


def two_children(h: Harness) -> tuple[str, dict[str, str], list[str]]:
    """A parent whose model started two tasks; its id, its children, the CLI's store flags
    (the harness's app is closed, so the CLI opens the store)."""
    parent = [turn(task("t1", "one"), task("t2", "two")), turn(text("ok"))]
    handle = start(h, [parent, [turn(text("1"))], [turn(text("2"))]])
    collect(handle, "split")
    kids = children(h, handle)
    h.app.close()
    return handle.id, kids, ["--backend", "sqlite", "--store", str(h.root.parent / "store")]


def test_sessions_tree_lists_children_under_their_parent(
    h: Harness, capsys: pytest.CaptureFixture[str]
) -> None:
    from coder_es.cli.main import main

    parent_id, kids, store = two_children(h)
    assert main([*store, "sessions", "--tree"]) == 0
    lines = capsys.readouterr().out.splitlines()
    ids = [line.split()[0] for line in lines[1:]]
    assert ids == [parent_id[:8], kids["t1"][:8], kids["t2"][:8]]
    assert lines[2].startswith("  ") and lines[2].split()[5] == parent_id[:8]


def test_tree_marks_task_nodes_with_the_child(
    h: Harness, capsys: pytest.CaptureFixture[str]
) -> None:
    from coder_es.cli.main import main

    parent_id, kids, store = two_children(h)
    assert main([*store, "--workspace", str(h.root), "tree", parent_id]) == 0
    out = capsys.readouterr().out
    assert f"[task -> {kids['t1'][:8]}]" in out and f"[task -> {kids['t2'][:8]}]" in out


def test_children_usage_and_cost_roll_up_into_the_parent_shown_apart(
    h: Harness, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from coder_es.cli.main import main
    from coder_es.providers.price import Price
    from coder_es.providers.pricing import PriceTable
    from projections.usage import usage_of

    used = {"usage": {"input_tokens": 100, "output_tokens": 10}}
    parent = [turn(task("t1", "one"), task("t2", "two"), **used), turn(text("ok"), **used)]
    kid = {"usage": {"input_tokens": 7, "output_tokens": 3}}
    handle = start(h, [parent, [turn(text("1"), **kid)], [turn(text("2"), **kid)]])
    collect(handle, "split")
    prices = PriceTable.default().merged({"scripted-test": Price.of(3, 15)})
    usage = usage_of(h.app, handle.loop.session.id, prices)
    assert (usage.own["input_tokens"], usage.own["output_tokens"]) == (200, 20)
    assert (usage.subagents["input_tokens"], usage.subagents["output_tokens"]) == (14, 6)
    assert usage.total["input_tokens"] == 214
    # $3 / $15 per million tokens: 200*3 + 20*15 and 14*3 + 6*15 millionths of a dollar.
    assert (usage.own_cost, usage.subagents_cost) == (Decimal("0.0009"), Decimal("0.000132"))
    assert usage.total_cost == Decimal("0.001032")
    h.app.close()
    # The user's price for the model, in the user config: `show` prices with it.
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "coder-es" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text('[providers.scripted.prices."scripted-test"]\ninput = 3\noutput = 15\n')
    where = ["--backend", "sqlite", "--store", str(h.root.parent / "store")]
    assert main([*where, "show", handle.id]) == 0
    out = capsys.readouterr().out
    assert (
        "usage  own in=200 out=20 $0.000900  subagents in=14 out=6 $0.000132  "
        "total in=214 out=26 $0.001032"
    ) in out


def test_a_subagent_of_an_unpriced_model_makes_the_cost_unknown(
    h: Harness, capsys: pytest.CaptureFixture[str]
) -> None:
    from coder_es.cli.main import main
    from coder_es.permissions.subagents import agent_definitions

    def factory(_name: str, model: str) -> ScriptedProvider:
        script = [turn(text("1"), usage={"input_tokens": 7, "output_tokens": 3})]
        if model != "house-model-7":
            used = {"usage": {"input_tokens": 100, "output_tokens": 10}}
            script = [turn(task("t1", "one", agent="local"), **used), turn(text("ok"), **used)]
        return ScriptedProvider(script, model=model or "scripted-test")

    agents = agent_definitions({"local": {"description": "on our box", "model": "house-model-7"}})
    service = AgentService(h.app, h.root, provider_factory=factory, agents=agents)
    handle = asyncio.run(service.create_session(SessionOptions(agent="build")))
    collect(handle, "split")
    h.app.close()
    where = ["--backend", "sqlite", "--store", str(h.root.parent / "store")]
    assert main([*where, "show", handle.id]) == 0
    out = capsys.readouterr().out
    assert (
        "usage  own in=200 out=20 $0  subagents in=7 out=3 unknown  total in=207 out=23 unknown"
        "  (no price for house-model-7: see [models.NAME] in the config)"
    ) in out


def test_a_parent_cassette_with_tasks_replays_in_verify_mode(h: Harness) -> None:
    from replay.cassette import dumps, export_session, loads
    from replay.engine import ReplayOptions, replay_cassette

    parent = [turn(task("t1", "one"), task("t2", "two")), turn(text("both answered"))]
    child_a = [turn(tool("read", "r1", path="README.md")), turn(text("it is a demo"))]
    handle = start(h, [parent, child_a, [turn(text("2"))]])
    collect(handle, "split")
    cassette = loads(dumps(export_session(h.app, handle.id)), "parent")
    kids = children(h, handle)
    assert [(call, c.session) for call, c in cassette.children] == [
        ("t1", kids["t1"]),
        ("t2", kids["t2"]),
    ]
    report = replay_cassette(cassette, ReplayOptions(mode="verify"))
    assert report.ok, report.divergence
    assert report.tool_calls == 2  # the two tasks, served from the recording
    # A child that no longer does what was recorded: the divergence names the child.
    call, child = cassette.children[0]
    events = tuple(
        dataclasses.replace(e, fields={**e.fields, "input": {"path": "AGENTS.md"}})
        if e.kind == "ToolCallRequested"
        else e
        for e in child.events
    )
    changed = dataclasses.replace(child, events=events)
    tampered = dataclasses.replace(cassette, children=((call, changed), *cassette.children[1:]))
    report = replay_cassette(tampered, ReplayOptions(mode="verify"))
    assert report.divergence is not None
    assert f"in subagent {kids['t1']} (task t1)" in report.divergence.summary
    assert report.divergence.kind == "ToolCallRequested"


def test_recorded_agent_definitions_are_what_a_replay_and_a_resume_offer(h: Harness) -> None:
    from coder_es.permissions.subagents import agent_definitions
    from replay.cassette import dumps, export_session, loads
    from replay.engine import ReplayOptions, replay_cassette

    config = {
        "reviewer": {"description": "Reviews diffs.", "preset": "explore", "prompt": "Be terse."}
    }
    first = [turn(task("t1", "review it", agent="reviewer")), turn(text("reviewed"))]
    second = [turn(task("t2", "again", agent="reviewer")), turn(text("reviewed again"))]
    queue = [first, [turn(text("looks fine"))], second, [turn(text("still fine"))]]

    def factory(_name: str, _model: str) -> ScriptedProvider:
        provider = ScriptedProvider(queue.pop(0), model="scripted-test")
        h.providers.append(provider)
        return provider

    configured = AgentService(
        h.app, h.root, provider_factory=factory, agents=agent_definitions(config)
    )
    handle = asyncio.run(configured.create_session(SessionOptions(agent="build")))
    collect(handle, "review")
    offered = h.providers[0].requests[0].tools
    assert (
        "- reviewer: Reviews diffs."
        in next(t for t in offered if t["name"] == "task")["description"]
    )
    # The configuration no longer has the agent: a replay sends what was recorded.
    cassette = loads(dumps(export_session(h.app, handle.id)), "parent")
    report = replay_cassette(cassette, ReplayOptions(mode="verify"))
    assert report.ok, report.divergence
    # Run again live, the child starts from the recorded definition (its prompt, its tools).
    report = replay_cassette(cassette, ReplayOptions(mode="live"))
    assert report.ok, report.divergence
    # Resumed without it, the session still offers it; the child runs the recorded definition.
    plain = AgentService(h.app, h.root, provider_factory=factory)
    resumed = asyncio.run(plain.open_session(handle.id, SessionOptions()))
    updates = collect(resumed, "once more")
    assert isinstance(updates[-1], up.TurnEnded) and updates[-1].reason == "end_turn"
    kid = children(h, handle)["t2"]
    child_request = h.providers[3].requests[0]
    assert child_request.messages[-1]["content"][-1]["text"] == "Be terse.\n\nagain"
    assert [t["name"] for t in child_request.tools] == ["read", "grep", "find"]
    assert h.events(kid)[0].settings["task"]["agent"] == "reviewer"


def test_the_export_of_a_run_with_tasks_holds_and_verifies_its_children(
    h: Harness, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from coder_es.cli.main import main

    parent_id, kids, store = two_children(h)
    out = tmp_path / "run.jsonl"
    assert main([*store, "export", parent_id, "--format", "jsonl", "-o", str(out)]) == 0
    header = json.loads(out.read_bytes().splitlines()[0])
    assert [(c["tool_use_id"], c["session"]) for c in header["children"]] == [
        ("t1", kids["t1"]),
        ("t2", kids["t2"]),
    ]
    assert main([*store, "verify", str(out)]) == 0
    assert "OK (3 session(s)" in capsys.readouterr().out
    assert main([*store, "verify", parent_id]) == 0
    assert "note: 2 subagent session(s) checked" in capsys.readouterr().out


def test_a_child_runs_with_what_its_events_say_as_its_resume_does(h: Harness) -> None:
    """A ``build`` subagent of a ``plan`` parent keeps the parent's read-only shell: recorded,
    so the child's own settings (``session_settings``), which it runs with, say so, and a
    resume of it decides the same (issue 36.1)."""
    from coder_es.agent.settings import SettingsConfig, session_settings
    from coder_es.permissions.subagents import agent_definitions

    config = {"builder": {"description": "Builds.", "preset": "build"}}
    queue = [
        [turn(task("t1", "build it", agent="builder")), turn(text("ok"))],
        [turn(text("built"))],
        [turn(text("again"))],
    ]

    def factory(_name: str, _model: str) -> ScriptedProvider:
        provider = ScriptedProvider(queue.pop(0), model="scripted-test")
        h.providers.append(provider)
        return provider

    svc = AgentService(h.app, h.root, provider_factory=factory, agents=agent_definitions(config))
    options = SessionOptions(agent="plan", rules=(Rule("task", None, "allow"),))
    handle = asyncio.run(svc.create_session(options))
    collect(handle, "build")
    kid = children(h, handle)["t1"]
    assert [t["name"] for t in h.providers[1].requests[0].tools] == ["read", "grep", "find", "bash"]
    child = session_settings(h.events(kid), SettingsConfig(tools=svc.tools))
    assert child.policy.preset.name == "build" and child.policy.shell_read_only
    assert child.offered == ("read", "grep", "find", "bash")
    resumed = asyncio.run(svc.open_session(kid, SessionOptions()))
    assert resumed.loop.deps.decision.policy == child.policy
    assert resumed.loop.deps.decision.policy.shell_read_only
