"""A session whose agent preset changes between turns (an editor's mode, ``resume --agent``)
records a ``SettingsChanged``, and a replay offers each turn the tools and rules of the preset
that turn ran in: the change is re-issued where it was recorded."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

from replay_helpers import text, tool

from coder_es.application import CoderApp
from coder_es.providers.scripted import ScriptedProvider
from coder_es.service.api import AgentService, SessionOptions
from replay.cassette import dumps, export_session, loads
from replay.engine import ReplayOptions, replay_cassette


def test_a_mid_session_mode_change_replays_with_each_turns_preset(workspace: Path) -> None:
    app = CoderApp()
    provider = ScriptedProvider(
        [
            {"blocks": [text("Writing."), tool("write", path="out.txt", content="one\n")]},
            {"blocks": [text("Written.")]},
            {"blocks": [text("Again."), tool("write", path="out.txt", content="two\n")]},
            {"blocks": [text("Plan mode refused it.")]},
        ]
    )
    service = AgentService(app, workspace, provider_factory=lambda _n, _m: provider)

    async def go() -> tuple[str, list[str], list[str]]:
        handle = await service.create_session(SessionOptions())
        async for _u in handle.send("write out.txt"):
            pass
        build_tools = [t["name"] for t in provider.requests[-1].tools]
        await handle.close()
        # Opening it again as it is changes nothing; another agent is recorded.
        again = await service.open_session(handle.id, SessionOptions())
        await again.close()
        plan = await service.open_session(handle.id, SessionOptions(agent="plan"))
        assert plan.opened().agent == "plan"
        async for _u in plan.send("write it again"):
            pass
        plan_tools = [t["name"] for t in provider.requests[-1].tools]
        await plan.close()
        return handle.id, build_tools, plan_tools

    sid, build_tools, plan_tools = asyncio.run(go())
    assert "write" in build_tools and "write" not in plan_tools
    assert (workspace / "out.txt").read_text() == "one\n"
    assert app.get_session(sid).agent == "plan"
    cassette = loads(dumps(export_session(app, sid)), "settings.cassette.jsonl")
    app.close()
    kinds = [e.kind for e in cassette.events]
    assert kinds.count("SettingsChanged") == 1
    changed = cassette.events[kinds.index("SettingsChanged")]
    assert changed.fields["agent"] == "plan" and changed.fields["context_budget"] > 0
    completed = [e.fields["is_error"] for e in cassette.events if e.kind == "ToolCallCompleted"]
    assert completed == [False, True]

    # The replay offers the build tools in the first turn and the plan tools in the second
    # (the request digests say so), and decides the second write by the plan preset.
    report = replay_cassette(cassette, ReplayOptions(mode="verify"))
    assert report.ok, report.render()
    assert report.replayed_events == len(cassette.events)

    # Had the change named explore, the second turn's request would offer explore's tools (no
    # bash): the replay follows the recorded preset, so it diverges from the recording there.
    other_preset = replace(changed, fields={**changed.fields, "agent": "explore"})
    events = list(cassette.events)
    events[kinds.index("SettingsChanged")] = other_preset
    other = replay_cassette(replace(cassette, events=tuple(events)), ReplayOptions(mode="verify"))
    assert not other.ok
    assert "the request differs from the recorded one" in other.render()
