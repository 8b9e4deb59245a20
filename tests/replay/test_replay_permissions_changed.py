"""A session whose permission rules change between turns replays identically: the change is a
user-side command, re-issued where it was recorded."""

from __future__ import annotations

import asyncio
from pathlib import Path

from replay_helpers import text, tool

from coder_es.application import CoderApp
from coder_es.permissions.rules import Rule
from coder_es.providers.scripted import ScriptedProvider
from coder_es.service.api import AgentService, SessionOptions
from replay.cassette import dumps, export_session, loads
from replay.engine import ReplayOptions, replay_cassette


def test_a_mid_session_permission_change_replays_identically(workspace: Path) -> None:
    app = CoderApp()
    provider = ScriptedProvider(
        [
            {"blocks": [text("Writing."), tool("write", path="out.txt", content="one\n")]},
            {"blocks": [text("The write was denied.")]},
            {"blocks": [text("Again."), tool("write", path="out.txt", content="two\n")]},
            {"blocks": [text("Written.")]},
        ]
    )
    service = AgentService(app, workspace, provider_factory=lambda _n, _m: provider)

    async def go() -> str:
        handle = await service.create_session(SessionOptions(rules=(Rule("write", None, "deny"),)))
        async for _u in handle.send("write out.txt"):
            pass
        assert handle.update_permissions((Rule("write", None, "allow"),), "ask")
        async for _u in handle.send("try again, it is allowed now"):
            pass
        await handle.close()
        return handle.id

    sid = asyncio.run(go())
    assert (workspace / "out.txt").read_text() == "two\n"
    cassette = loads(dumps(export_session(app, sid)), "permissions.cassette.jsonl")
    app.close()
    kinds = [e.kind for e in cassette.events]
    decisions = [e.fields["decision"] for e in cassette.events if e.kind == "PermissionDecided"]
    assert decisions == ["deny", "allow"]
    changed = cassette.events[kinds.index("PermissionsChanged")]
    assert changed.fields["rules"] == [
        {"tool": "write", "pattern": None, "action": "allow", "source": "user"}
    ]
    # Between the two turns: after the first turn's end, before the second message.
    assert kinds.index("PermissionsChanged") < len(kinds) - kinds[::-1].index("UserMessageAdded")

    report = replay_cassette(cassette, ReplayOptions(mode="verify"))
    assert report.ok, report.render()
    assert report.replayed_events == len(cassette.events)
