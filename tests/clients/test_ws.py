"""``coder-es serve`` driven with the ``websockets`` client: approvals, cancel, resume, filters,
hot reload, branching, tokens and bad input."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import websockets
from client_helpers import (
    REPO,
    child_env,
    cli,
    make_workspace,
    run,
    serve_process,
    stored_events,
    user_config_file,
)
from websockets.asyncio.client import ClientConnection

ASK_BASH = '[permissions.rules]\nbash = "ask"\n'
TURNS: list[dict[str, Any]] = [
    {
        "blocks": [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "name": "bash", "input": {"command": "echo hello > out.txt"}},
        ]
    },
    {"blocks": [{"type": "text", "text": "All done."}], "usage": {"output_tokens": 7}},
]


async def recv(ws: ClientConnection) -> dict[str, Any]:
    return json.loads(await asyncio.wait_for(ws.recv(), 20))


async def until(ws: ClientConnection, kind: str, seen: list[dict[str, Any]]) -> dict[str, Any]:
    while True:
        msg = await recv(ws)
        seen.append(msg)
        if msg["type"] == kind:
            return msg


async def send(ws: ClientConnection, **msg: Any) -> None:
    await ws.send(json.dumps(msg))


def test_approval_flow_history_and_state(tmp_path: Path) -> None:
    ws_dir = make_workspace(tmp_path, ASK_BASH, TURNS)

    async def scenario() -> str:
        async with serve_process(ws_dir, tmp_path) as (url, _proc), websockets.connect(url) as ws:
            hello = await recv(ws)
            assert hello["type"] == "connected" and hello["resume_token"]
            await send(ws, type="send_message", text="make out.txt")
            seen: list[dict[str, Any]] = []
            ask = await until(ws, "awaiting_approval", seen)
            assert ask["tool"] == "bash" and ask["subject"] == "echo hello > out.txt"
            assert [m["type"] for m in seen][:2] == ["user_message", "text_delta"]
            assert "tool_request" in [m["type"] for m in seen]
            await send(ws, type="get_state", id="s1")
            state = await until(ws, "state", seen)
            assert (
                state["re"] == "s1"
                and state["pending_approvals"][0]["tool_use_id"] == ask["tool_use_id"]
            )
            await send(ws, type="tool_decision", tool_use_id=ask["tool_use_id"], decision="allow")
            done = await until(ws, "finished", seen)
            assert done["reason"] == "end_turn" and done["usage"]["output_tokens"] == 7
            types = [m["type"] for m in seen]
            assert (
                types.index("tool_decided")
                < types.index("tool_started")
                < types.index("tool_completed")
            )
            streamed = [m["seq"] for m in seen if "seq" in m]
            assert streamed == list(range(1, len(streamed) + 1))
            await send(ws, type="get_history", id=2)
            history = await until(ws, "history", [])
            assert [i["kind"] for i in history["items"]] == [
                "user",
                "text",
                "tool_call",
                "tool_result",
                "text",
            ]
            return str(hello["session_id"])

    sid = run(scenario())
    assert (ws_dir / "out.txt").read_text() == "hello\n"
    decided = [e for e in stored_events(ws_dir, sid) if type(e).__name__ == "PermissionDecided"]
    assert [(e.decision, e.decided_by) for e in decided] == [("allow", "client")]


def test_deny_cancel_and_bad_input(tmp_path: Path) -> None:
    ws_dir = make_workspace(tmp_path, ASK_BASH, [TURNS[0], TURNS[0], TURNS[1]])

    async def scenario() -> None:
        async with serve_process(ws_dir, tmp_path) as (url, _proc), websockets.connect(url) as ws:
            await recv(ws)
            await ws.send("{not json")
            bad = await recv(ws)
            assert bad["type"] == "error" and not bad["fatal"]
            await send(ws, type="tool_decision", tool_use_id="nope", decision="allow", id=5)
            stray = await recv(ws)
            assert stray["code"] == "not_pending" and stray["re"] == 5
            await send(ws, type="send_message", text="make out.txt")
            ask = await until(ws, "awaiting_approval", [])
            await send(ws, type="cancel")
            seen: list[dict[str, Any]] = []
            done = await until(ws, "finished", seen)
            assert done["reason"] == "cancelled"
            assert "cancelled" in [m["type"] for m in seen]
            # The next turn's call is a new question; the client denies it, saying why.
            await send(ws, type="send_message", text="again")
            ask2 = await until(ws, "awaiting_approval", [])
            assert ask2["tool_use_id"] != ask["tool_use_id"]
            await send(
                ws,
                type="tool_decision",
                tool_use_id=ask2["tool_use_id"],
                decision="deny",
                reason="not now",
            )
            seen = []
            await until(ws, "finished", seen)
            (err,) = [m for m in seen if m["type"] == "tool_error"]
            assert "not now" in err["output"]

    run(scenario())
    assert not (ws_dir / "out.txt").exists()


def test_disconnect_and_resume_resends_pending_approval(tmp_path: Path) -> None:
    ws_dir = make_workspace(tmp_path, ASK_BASH, TURNS)

    async def scenario() -> None:
        async with serve_process(ws_dir, tmp_path) as (url, _proc):
            first: list[dict[str, Any]] = []
            async with websockets.connect(url) as ws:
                hello = await recv(ws)
                await send(ws, type="send_message", text="make out.txt")
                ask = await until(ws, "awaiting_approval", first)
            # Gone mid-turn; the turn waits. Resume from the last message seen.
            last = first[-1]["seq"]
            resume = f"{url}&resume={hello['resume_token']}&last_seq={last}"
            async with websockets.connect(resume) as ws:
                again = await recv(ws)
                assert again["resumed"] and again["session_id"] == hello["session_id"]
                resent = await recv(ws)
                assert resent["type"] == "awaiting_approval" and resent["resent"]
                assert resent["tool_use_id"] == ask["tool_use_id"]
                await send(
                    ws, type="tool_decision", tool_use_id=ask["tool_use_id"], decision="allow"
                )
                rest: list[dict[str, Any]] = []
                await until(ws, "finished", rest)
            seqs = [m["seq"] for m in first + rest if "seq" in m and not m.get("resent")]
            assert seqs == list(range(1, len(seqs) + 1))  # nothing lost, nothing twice

            # A client that missed messages gets them on resume.
            async with websockets.connect(f"{url}&resume={hello['resume_token']}&last_seq=2") as ws:
                await recv(ws)
                replayed = [await recv(ws) for _ in range(len(seqs) - 2)]
                assert [m["seq"] for m in replayed] == seqs[2:]
            async with websockets.connect(f"{url}&resume=bogus") as ws:
                refused = await recv(ws)
                assert refused["fatal"] and refused["code"] == "bad_resume_token"

    run(scenario())
    assert (ws_dir / "out.txt").exists()


def test_server_rules_and_hot_reload(tmp_path: Path) -> None:
    ws_config = ASK_BASH + '\n[serve.rules]\nbash = "deny"\n'
    ws_dir = make_workspace(tmp_path, "", TURNS)
    config_file = user_config_file(tmp_path, ws_config)

    async def turn(ws: ClientConnection) -> list[dict[str, Any]]:
        await send(ws, type="send_message", text="make out.txt")
        seen: list[dict[str, Any]] = []
        await until(ws, "finished", seen)
        return seen

    async def scenario() -> None:
        async with serve_process(ws_dir, tmp_path) as (url, _proc), websockets.connect(url) as ws:
            await recv(ws)
            seen = await turn(ws)
            decided = [m for m in seen if m["type"] == "tool_decided"]
            assert [(d["decision"], d["decided_by"]) for d in decided] == [("deny", "rule")]
            assert "awaiting_approval" not in [m["type"] for m in seen]

            config_file.write_text(ws_config.replace('bash = "deny"', 'bash = "allow"'))
            reloaded = await until(ws, "config_reloaded", [])
            assert "serve" in reloaded["sections"]
            config_file.write_text("[serve\nbroken")
            broken = await until(ws, "error", [])
            assert broken["code"] == "config" and not broken["fatal"]
            # The last good configuration (allow) is still in force: a new session is approved.
            async with websockets.connect(url) as ws:
                await recv(ws)
                seen = await turn(ws)
                decided = [m for m in seen if m["type"] == "tool_decided"]
                assert [(d["decision"], d["decided_by"]) for d in decided] == [("allow", "rule")]

    run(scenario())
    assert (ws_dir / "out.txt").read_text() == "hello\n"


def test_rewind_and_fork_over_the_socket(tmp_path: Path) -> None:
    turns = [{"blocks": [{"type": "text", "text": "Answer."}]}] * 2
    ws_dir = make_workspace(tmp_path, ASK_BASH, turns)

    async def scenario() -> None:
        async with serve_process(ws_dir, tmp_path) as (url, _proc), websockets.connect(url) as ws:
            hello = await recv(ws)
            await send(ws, type="send_message", text="first")
            user = (await until(ws, "user_message", []))["node"]
            await until(ws, "finished", [])
            await send(ws, type="rewind", node=user, id="r")
            moved = await until(ws, "moved", [])
            assert moved["re"] == "r" and moved["node"] == user
            await send(ws, type="send_message", text="second")
            await until(ws, "finished", [])
            await send(ws, type="get_history")
            items = (await until(ws, "history", []))["items"]
            assert [i["text"] for i in items if i["kind"] == "user"] == ["first", "second"]
            await send(ws, type="fork", new_session=True)
            forked = await until(ws, "moved", [])
            child = forked["session"]
            assert child != hello["session_id"]
            await send(ws, type="switch", node="999")
            err = await until(ws, "error", [])
            assert "999" in err["message"] and not err["fatal"]
            async with websockets.connect(f"{url}&session={child}") as ws:
                opened = await recv(ws)
                assert opened["session_id"] == child and not opened["resumed"]

    run(scenario())


def test_exposed_address_needs_a_token(tmp_path: Path) -> None:
    ws_dir = make_workspace(tmp_path, "", TURNS)
    env = child_env(tmp_path)
    refused = subprocess.run(
        cli(
            ws_dir,
            "serve",
            "--host",
            "0.0.0.0",
            "--port",
            "0",
            "--script",
            str(tmp_path / "script.json"),
        ),
        env=env,
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2 and "token" in refused.stderr

    async def scenario() -> None:
        token_env = {"CODER_ES_SERVE_TOKEN": "s3cret"}
        async with serve_process(ws_dir, tmp_path, "--host", "127.0.0.1", extra_env=token_env) as (
            url,
            _p,
        ):
            with pytest.raises(websockets.exceptions.InvalidStatus) as info:
                async with websockets.connect(url):
                    pass
            assert info.value.response.status_code == 401
            headers = {"Authorization": "Bearer s3cret"}
            async with websockets.connect(url, additional_headers=headers) as ws:
                assert (await recv(ws))["type"] == "connected"

    run(scenario())


def test_a_permissions_reload_reaches_an_open_session(tmp_path: Path) -> None:
    # [permissions] (not [serve.rules]) is the session's own policy: a reload must reach a
    # session that is already open, recorded as PermissionsChanged between its turns.
    deny = '[permissions.rules]\nbash = "deny"\n'
    ws_dir = make_workspace(tmp_path, "", TURNS * 2)
    config_file = user_config_file(tmp_path, deny)

    async def turn(ws: ClientConnection) -> list[tuple[str, str]]:
        await send(ws, type="send_message", text="make out.txt")
        seen: list[dict[str, Any]] = []
        await until(ws, "finished", seen)
        return [(m["decision"], m["decided_by"]) for m in seen if m["type"] == "tool_decided"]

    async def scenario() -> str:
        async with serve_process(ws_dir, tmp_path) as (url, _proc), websockets.connect(url) as ws:
            hello = await recv(ws)
            assert await turn(ws) == [("deny", "rule")]
            config_file.write_text(deny.replace('"deny"', '"allow"'))
            reloaded = await until(ws, "config_reloaded", [])
            assert "permissions" in reloaded["sections"]
            assert await turn(ws) == [("allow", "rule")]
            return str(hello["session_id"])

    sid = run(scenario())
    assert (ws_dir / "out.txt").read_text() == "hello\n"
    events = stored_events(ws_dir, sid)
    names = [type(e).__name__ for e in events]
    changed = names.index("PermissionsChanged")
    assert (
        names.index("UserMessageAdded")
        < changed
        < len(names) - names[::-1].index("UserMessageAdded")
    )
    assert [r["action"] for r in events[changed].rules] == ["allow"]
