"""A whole session with the scripted provider calling MCP tools: offered as mcp__SERVER__TOOL,
permissioned by their annotations, recorded as ordinary tool calls, replayed in verify mode
without any server, and in live mode against the server (a changed server is a divergence)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from mcp_helpers import edge_config

from coder_es.agent import updates as up
from coder_es.application import CoderApp
from coder_es.permissions.rules import Rule
from coder_es.providers.scripted import ScriptedProvider
from coder_es.service.api import AgentService, SessionOptions, auto_answerer
from replay.cassette import dumps, export_session, loads
from replay.engine import ReplayOptions, replay_cassette


def tool(name: str, **input: Any) -> dict[str, Any]:
    return {"type": "tool_use", "name": name, "input": input}


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


SCRIPT = [
    {
        "blocks": [
            text("Asking the server."),
            tool("mcp__edge__echo", text="hello"),
            tool("mcp__edge__wipe", target="everything"),
            tool("mcp__edge__fail", reason="testing"),
        ]
    },
    {"blocks": [text("Done.")]},
]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    workspace = tmp_path_factory.mktemp("ws")
    app = CoderApp()
    provider = ScriptedProvider(SCRIPT)
    service = AgentService(
        app, workspace, provider_factory=lambda _n, _m: provider, mcp_servers=[edge_config()]
    )
    requests: list[Any] = []
    original = provider.stream

    def spy(request: Any) -> Any:
        requests.append(request)
        return original(request)

    provider.stream = spy  # type: ignore[method-assign]

    async def go() -> tuple[str, list[up.Update]]:
        # A rule lets the (unannotated, so destructive) fail tool through; wipe still asks.
        options = SessionOptions(rules=(Rule("mcp__edge__fail", None, "allow"),))
        handle = await service.create_session(options)
        updates = [u async for u in handle.send("use the tools", answerer=auto_answerer(False))]
        await handle.close()
        return handle.id, updates

    sid, updates = asyncio.run(go())
    cassette = loads(dumps(export_session(app, sid)), "mcp.cassette.jsonl")
    app.close()
    return {"cassette": cassette, "updates": updates, "requests": requests, "ws": workspace}


def test_the_model_is_offered_the_servers_tools(recorded: dict[str, Any]) -> None:
    names = [t["name"] for t in recorded["requests"][0].tools]
    assert {"read", "bash", "mcp__edge__echo", "mcp__edge__wipe"} <= set(names)


def test_calls_are_recorded_as_ordinary_tool_calls(recorded: dict[str, Any]) -> None:
    events = recorded["cassette"].events
    kinds = [e.kind for e in events]
    listed = events[kinds.index("McpToolsListed")]
    [server] = listed.fields["servers"]
    assert server["name"] == "edge" and server["status"] == "ready"
    assert server["version"]["name"] == "edge"
    # Listed before the first model call, so a replay knows what the model was offered.
    assert kinds.index("McpToolsListed") < kinds.index("ModelResponded")
    decided = {e.fields["tool"]: e.fields for e in events if e.kind == "PermissionDecided"}
    assert decided["mcp__edge__echo"]["decision"] == "allow"
    # build asks for a destructive tool; this run answers no.
    assert decided["mcp__edge__wipe"]["decision"] == "deny"
    assert decided["mcp__edge__wipe"]["matched_rule"] == "preset:build:ask mcp destructive"
    assert decided["mcp__edge__fail"]["matched_rule"] == "user:allow mcp__edge__fail"
    done = {e.fields["name"]: e.fields for e in events if e.kind == "ToolCallCompleted"}
    assert done["mcp__edge__echo"]["output"].startswith("echo: hello")
    assert not done["mcp__edge__echo"]["is_error"]
    assert (
        done["mcp__edge__fail"]["is_error"]
        and "it failed: testing" in (done["mcp__edge__fail"]["output"])
    )
    assert done["mcp__edge__wipe"]["output"].startswith("Permission denied")


def test_verify_replay_needs_no_server(recorded: dict[str, Any]) -> None:
    report = replay_cassette(recorded["cassette"], ReplayOptions(mode="verify"))
    assert report.ok, report.render()
    assert report.replayed_events == len(recorded["cassette"].events)


def test_live_replay_calls_the_server_and_reports_a_changed_one(recorded: dict[str, Any]) -> None:
    same = replay_cassette(
        recorded["cassette"], ReplayOptions(mode="live", mcp_servers=(edge_config(),))
    )
    assert same.ok, same.render()
    changed = replace(edge_config(), disabled_tools=("fail",))
    report = replay_cassette(
        recorded["cassette"], ReplayOptions(mode="live", mcp_servers=(changed,))
    )
    assert not report.ok
    assert report.divergence is not None and report.divergence.kind == "McpToolsListed"


def test_a_server_that_fails_to_start_leaves_the_session_going(tmp_path: Path) -> None:
    app = CoderApp()
    provider = ScriptedProvider([{"blocks": [text("No tools today.")]}])
    service = AgentService(
        app,
        tmp_path,
        provider_factory=lambda _n, _m: provider,
        mcp_servers=[edge_config("broken", "--fail-start")],
    )

    async def go() -> list[up.Update]:
        handle = await service.create_session(SessionOptions())
        updates = [u async for u in handle.send("hi")]
        await handle.close()
        return updates

    updates = asyncio.run(go())
    errors = [u for u in updates if isinstance(u, up.Error)]
    assert errors and errors[0].kind == "McpServerFailed"
    assert "'broken'" in errors[0].message and "frobnicator" in errors[0].message
    assert isinstance(updates[-1], up.TurnEnded) and updates[-1].reason == "end_turn"
    app.close()
