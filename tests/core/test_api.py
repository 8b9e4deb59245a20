"""Issue 36.4: the public Python API (``import coder_es``).

The surface is what ``coder_es.__all__`` lists, each name loads on first use (``import coder_es``
stays cheap for the CLI), and the facade records what the service and the CLI record: a session
started here is the CLI's, an own loop's turns are proper events (tree, rewind, verify, export).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import coder_es
from coder_es.domain.session import Session as DomainSession

REPO = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------- the surface


def test_every_exported_name_resolves_and_all_lists_exactly_them() -> None:
    exported = set(coder_es._EXPORTS)
    assert set(coder_es.__all__) == exported | {"__version__"}
    for name in sorted(exported):
        assert getattr(coder_es, name) is not None, name
    assert isinstance(coder_es.updates.TurnEnded("end_turn", 1, "3").to_dict(), dict)
    assert coder_es.SearchHit.__name__ == "Hit"
    with pytest.raises(AttributeError):
        _ = coder_es.AgentService  # private: not part of the surface


def test_every_error_is_one_hierarchy() -> None:
    for name in coder_es.__all__:
        value = getattr(coder_es, name)
        if isinstance(value, type) and issubclass(value, Exception):
            assert issubclass(value, coder_es.CoderESError), name
    assert issubclass(coder_es.ReplayMismatch, coder_es.CoderESError)


def test_importing_coder_es_loads_nothing_heavy() -> None:
    probe = (
        "import json, sys, coder_es; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('coder_es', "
        "'eventsourcing', 'projections', 'replay', 'httpx', 'rich')))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    # coder_es._version holds one string (__version__, importable by any layer).
    assert json.loads(out.stdout) == ["coder_es", "coder_es._version"]


# ---------------------------------------------------------------------- sessions


def _text(text: str) -> dict[str, Any]:
    return {"blocks": [{"type": "text", "text": text}]}


def _call(name: str, **args: Any) -> dict[str, Any]:
    return {"blocks": [{"type": "tool_use", "name": name, "input": args}]}


def test_a_session_started_here_is_the_clis(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("alpha\n")
    model = coder_es.ScriptedProvider([_call("read", path="a.txt"), _text("It says alpha.")])

    async def run() -> str:
        async with coder_es.open_store(tmp_path) as store:
            async with await store.start(model, title="api") as session:
                result = await session.run("what is in a.txt?")
            assert result.ok and result.text == "It says alpha."
            return session.id

    sid = asyncio.run(run())
    listed = subprocess.run(
        [sys.executable, "-m", "coder_es.cli.main", "sessions", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert listed.returncode == 0, listed.stderr
    assert sid in listed.stdout and '"api"' in listed.stdout


def test_run_refuses_what_a_rule_asks_unless_answered(tmp_path: Path) -> None:
    (tmp_path / "x.log").write_text("x")

    async def turn(answer: Any) -> coder_es.TurnResult:
        model = coder_es.ScriptedProvider([_call("bash", command="rm x.log"), _text("done")])
        rules = [coder_es.ask("bash")]
        async with (
            coder_es.open_store(tmp_path) as store,
            await store.start(model, rules=rules) as session,
        ):
            return await session.run("remove x.log", answer=answer)

    refused = asyncio.run(turn(coder_es.reject_asks))
    decided = [u for u in refused.updates if u.type == "permission_decided"]
    assert decided and decided[0].to_dict()["decision"] == "deny"
    assert (tmp_path / "x.log").exists()
    asyncio.run(turn(coder_es.allow_asks))
    assert not (tmp_path / "x.log").exists()


def test_a_rule_for_an_unknown_tool_is_refused_at_start(tmp_path: Path) -> None:
    rule = coder_es.allow("no_such_tool")  # could be a tool of the caller's: checked at start

    async def start() -> None:
        async with coder_es.open_store(tmp_path) as store:
            await store.start(coder_es.ScriptedProvider([_text("hi")]), rules=[rule])

    with pytest.raises(coder_es.UsageError, match="no_such_tool"):
        asyncio.run(start())
    with pytest.raises(coder_es.UsageError):
        coder_es.deny("")


def test_moving_the_head_reloads_the_open_session(tmp_path: Path) -> None:
    model = coder_es.ScriptedProvider([_text("one"), _text("two"), _text("three")])

    async def run() -> None:
        async with coder_es.open_store(tmp_path) as store:
            session = await store.start(model)
            first = await session.run("1")
            await session.run("2")
            store.rewind(session.id, first.head or "")
            assert session.head == first.head
            third = await session.run("3")
            tree = store.tree(session.id)
            # The third message continues from the rewound node: a second branch.
            assert tree.parent_of(tree.parent_of(third.head or "") or "") == first.head
            assert len(tree.leaves()) == 2
            await session.close()

    asyncio.run(run())


# ---------------------------------------------------------------------- an own loop


def _own_session(tmp_path: Path) -> str:
    (tmp_path / "app.py").write_text("print('hi')\n")
    with (
        coder_es.open_store(tmp_path) as store,
        store.own_loop(provider="mine", model="m1", title="own") as loop,
    ):
        loop.user("say bye")
        loop.model("reading", tool_calls=[coder_es.ToolUse("c1", "read", {"path": "app.py"})])
        loop.tool_result("c1", "print('hi')")
        loop.model(tool_calls=[coder_es.ToolUse("c2", "patch", {"to": "bye"})])
        loop.permission("c2", True, by="user")
        loop.observe("app.py")
        (tmp_path / "app.py").write_text("print('bye')\n")
        loop.tool_result("c2", "patched", files=["app.py"])
        loop.model("done", usage={"input_tokens": 5, "output_tokens": 1})
        return loop.id


def test_an_own_loop_records_the_events_the_loop_records(tmp_path: Path) -> None:
    sid = _own_session(tmp_path)
    with coder_es.open_store(tmp_path) as store:
        events = store.events(sid)
        kinds = [type(e).__name__ for e in events]
        assert kinds == [
            "Started",
            "UserMessageAdded",
            "ModelResponded",
            "ToolCallRequested",
            "ToolCallCompleted",
            "ModelResponded",
            "ToolCallRequested",
            "PermissionDecided",
            "FileObserved",
            "ToolCallCompleted",
            "ModelResponded",
        ]
        responded = [e for e in events if isinstance(e, DomainSession.ModelResponded)]
        assert {(e.provider, e.model) for e in responded} == {("mine", "m1")}
        done = [e for e in events if isinstance(e, DomainSession.ToolCallCompleted)][-1]
        [change] = done.files_changed
        assert change["path"] == "app.py" and change["before"] != change["after"]
        assert store.verify(sid).ok
        tree = store.tree(sid)
        assert len(tree) == 6
        # Rewinding to the user's message puts the file back.
        store.rewind(sid, tree.nodes()[0])
        assert (tmp_path / "app.py").read_text() == "print('hi')\n"
        # And the export (a verifiable audit trail) holds the loop's turns.
        trail = store.export(sid, "jsonl")
        assert b"patched" in trail


def test_an_own_loop_holds_the_session(tmp_path: Path) -> None:
    sid = _own_session(tmp_path)
    model = coder_es.ScriptedProvider([_text("hi")])

    async def resume_while_held() -> None:
        async with coder_es.open_store(tmp_path) as store:
            with store.own_loop(sid), pytest.raises(coder_es.SessionBusyError):
                # Resuming under another provider records a SettingsChanged: refused.
                await store.resume(sid, model)
            # Released: the session runs on (under the scripted provider from now on).
            async with await store.resume(sid, model) as session:
                assert (await session.run("hello")).text == "hi"

    asyncio.run(resume_while_held())
    with coder_es.open_store(tmp_path) as store:
        loop = store.own_loop(sid)
        loop.close()
        with pytest.raises(coder_es.UsageError, match="closed"):
            loop.user("after close")
        with store.own_loop(sid) as again, pytest.raises(coder_es.UsageError):
            again.tool_result("never-called", "x")


def test_a_replayed_own_loop_is_checked_step_by_step(tmp_path: Path) -> None:
    sid = _own_session(tmp_path)
    with coder_es.open_store(tmp_path) as store:
        path = store.record_cassette(sid, tmp_path / "own.cassette.jsonl")

    def loop(report: Any, replay: coder_es.OwnLoopReplay, last: str) -> None:
        report.user("say bye")
        first = replay.next_response()
        report.model(first.text, tool_calls=first.tool_calls)
        report.tool_result("c1", replay.result_of("c1"))
        second = replay.next_response()
        report.model(second.text, tool_calls=second.tool_calls)
        report.permission("c2", True)
        report.observe("app.py")
        report.tool_result("c2", replay.result_of("c2"), files=["app.py"])
        report.model(last)

    same = coder_es.replay_own_loop(path)
    loop(same, same, "done")
    same.finish()

    changed = coder_es.replay_own_loop(path)
    with pytest.raises(coder_es.ReplayMismatch, match="ModelResponded"):
        loop(changed, changed, "finished")  # the loop's last answer differs from the recording

    short = coder_es.replay_own_loop(path)
    short.user("say bye")
    with pytest.raises(coder_es.ReplayMismatch, match="stopped after 1"):
        short.finish()
