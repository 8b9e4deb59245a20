"""A session that stopped at its step limit replays identically, and the limit a replay uses is
the one its StepLimitReached records."""

from __future__ import annotations

import asyncio
from pathlib import Path

from replay_helpers import text, tool

from coder_es.application import CoderApp
from coder_es.providers.scripted import ScriptedProvider
from coder_es.service.api import AgentService, SessionOptions
from replay.cassette import dumps, export_session, loads
from replay.engine import ReplayOptions, infer_max_steps, replay_cassette


def test_a_turn_stopped_at_its_step_limit_replays_identically(workspace: Path) -> None:
    (workspace / "a.txt").write_text("a\n")
    app = CoderApp()
    provider = ScriptedProvider(
        [
            {"blocks": [text("Reading."), tool("read", path="a.txt")]},
            {"blocks": [text("Again."), tool("read", path="a.txt")]},
            {"blocks": [text("Never asked for.")]},
        ]
    )
    service = AgentService(app, workspace, provider_factory=lambda _n, _m: provider)

    async def go() -> str:
        handle = await service.create_session(SessionOptions(max_steps=2))
        async for _u in handle.send("read a.txt"):
            pass
        await handle.close()
        return handle.id

    sid = asyncio.run(go())
    cassette = loads(dumps(export_session(app, sid)), "limit.cassette.jsonl")
    app.close()
    assert cassette.events[-1].kind == "StepLimitReached"
    assert cassette.events[-1].fields["steps"] == 2
    assert infer_max_steps(cassette.events) == 2

    report = replay_cassette(cassette, ReplayOptions(mode="verify"))
    assert report.ok, report.render()
    assert report.replayed_events == len(cassette.events)

    # Replayed with a larger limit, the current code asks the model again where the recording
    # stopped: the replay reports it instead of passing.
    report = replay_cassette(cassette, ReplayOptions(mode="verify", max_steps=3))
    assert not report.ok
