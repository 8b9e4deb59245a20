"""ACP session lifecycle beyond new/load: modes and config options (agent preset, model),
``session/resume``, ``session/close``, ``session/list`` by cwd and usage updates, driven through
the ``acp`` package's own client side."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from acp import RequestError, image_block, text_block
from client_helpers import make_workspace, run, stored_events, user_config_file
from test_acp import ASK_EDITS, WRITE_TURNS, EditorClient, agent, start


def test_modes_switch_the_agent_preset_and_usage_is_reported(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path, "", WRITE_TURNS)
    client = EditorClient()

    async def scenario() -> str:
        async with agent(client, ws, tmp_path) as (conn, _proc):
            await start(conn, fs=False)
            new = await conn.new_session(cwd=str(ws), mcp_servers=[])
            sid = new.session_id
            assert new.modes.current_mode_id == "build"
            assert [m.id for m in new.modes.available_modes] == ["build", "plan", "explore"]
            options = {o.id: o for o in new.config_options}
            assert options["mode"].category == "mode" and options["mode"].current_value == "build"
            assert options["model"].category == "model"
            assert options["model"].current_value in [c.value for c in options["model"].options]

            await conn.set_session_mode(session_id=sid, mode_id="plan")
            assert [u.current_mode_id for u in client.of("current_mode_update")] == ["plan"]
            [changed] = client.of("config_option_update")
            assert {o.id: o.current_value for o in changed.config_options}["mode"] == "plan"

            # In plan mode the model's write is refused: the file is not written.
            response = await conn.prompt(session_id=sid, prompt=[text_block("go")])
            assert response.stop_reason == "end_turn"
            assert not (ws / "hello.txt").exists()
            statuses = [u.status for u in client.of("tool_call_update") if u.status]
            assert statuses[-1] == "failed"
            # Each model response reports how full the context is against the model's window.
            usage = client.of("usage_update")
            assert usage and all(u.size > 0 and u.used >= 0 for u in usage)

            # Back to build through the config option; an unknown choice is refused.
            answer = await conn.set_config_option(session_id=sid, config_id="mode", value="build")
            assert {o.id: o.current_value for o in answer.config_options}["mode"] == "build"
            assert client.of("current_mode_update")[-1].current_mode_id == "build"
            with pytest.raises(RequestError) as refused:
                await conn.set_config_option(session_id=sid, config_id="model", value="nope-1")
            assert "not a choice" in str(refused.value.data)
            with pytest.raises(RequestError) as refused:
                await conn.set_session_mode(session_id=sid, mode_id="yolo")
            assert "unknown mode" in str(refused.value.data)
            return str(sid)

    sid = run(scenario())
    [done] = [e for e in stored_events(ws, sid) if type(e).__name__ == "ToolCallCompleted"]
    assert done.is_error


def test_resume_reattaches_without_replay_and_close_forgets_the_session(tmp_path: Path) -> None:
    turns: list[dict[str, Any]] = [{"blocks": [{"type": "text", "text": "Answer."}]}] * 3
    ws = make_workspace(tmp_path, "", turns)
    other = tmp_path / "other"
    other.mkdir()
    client = EditorClient()

    async def scenario() -> None:
        async with agent(client, ws, tmp_path) as (conn, _proc):
            init = await start(conn, fs=False)
            caps = init.agent_capabilities.session_capabilities
            assert caps.resume is not None and caps.close is not None
            new = await conn.new_session(cwd=str(ws), mcp_servers=[])
            sid = new.session_id
            await conn.prompt(session_id=sid, prompt=[text_block("first")])

            await conn.close_session(session_id=sid)
            with pytest.raises(RequestError) as refused:
                await conn.prompt(session_id=sid, prompt=[text_block("again")])
            assert "not open" in str(refused.value.data)

            client.updates.clear()
            resumed = await conn.resume_session(session_id=sid, cwd=str(ws), mcp_servers=[])
            assert resumed.modes.current_mode_id == "build"
            # Nothing of the conversation is sent again: the client already shows it.
            assert not client.of("user_message_chunk") and not client.of("agent_message_chunk")
            await conn.prompt(session_id=sid, prompt=[text_block("second")])
            assert client.text() == "Answer."

            listed = await conn.list_sessions(cwd=str(ws))
            assert [s.session_id for s in listed.sessions] == [sid]
            assert (await conn.list_sessions(cwd=str(other))).sessions == []

    run(scenario())


def test_branch_commands_and_rewind_results_as_a_tool_call(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path, "", WRITE_TURNS)
    client = EditorClient()

    async def say(conn: Any, sid: str, text: str) -> str:
        client.updates.clear()
        await conn.prompt(session_id=sid, prompt=[text_block(text)])
        return client.text()

    async def scenario() -> None:
        async with agent(client, ws, tmp_path) as (conn, _proc):
            await start(conn, fs=False)
            new = await conn.new_session(cwd=str(ws), mcp_servers=[])
            sid = new.session_id
            # The commands are advertised right after the response, before the turn's updates.
            await conn.prompt(session_id=sid, prompt=[text_block("write the greeting")])
            [commands] = client.of("available_commands_update")
            names = {c.name for c in commands.available_commands}
            assert names >= {"tree", "rewind", "switch", "fork", "label", "diff", "search"}
            assert (ws / "hello.txt").read_text() == "hi\n"

            tree = await say(conn, sid, "/tree")
            user = next(line.split()[0] for line in tree.splitlines() if "user write" in line)
            assert "start" in await say(conn, sid, f"/label {user} start")
            assert "hello.txt" in await say(conn, sid, "/diff start")
            assert "greeting" in await say(conn, sid, "/search greeting")

            reply = await say(conn, sid, "/rewind start")
            assert f"-> {user}" in reply
            assert not (ws / "hello.txt").exists()
            # The editor sees the rewind as a finished tool call naming the restored files.
            [call] = client.of("tool_call")
            assert call.status == "completed" and call.title == f"rewind to node {user}"
            assert [loc.path for loc in call.locations] == [str(ws / "hello.txt")]
            assert call.raw_output["files"][0]["path"] == "hello.txt"
            assert call.raw_output["conflicts"] == []

    run(scenario())


def test_usage_update_carries_the_session_cost_across_a_resume(tmp_path: Path) -> None:
    usage = {"input_tokens": 1_000_000, "output_tokens": 100_000}
    turns: list[dict[str, Any]] = [
        {"blocks": [{"type": "text", "text": "Answer."}], "usage": usage}
    ] * 3
    ws = make_workspace(tmp_path, "", turns)
    # Dollars per million tokens for the scripted provider's model (named after its script).
    user_config_file(tmp_path, "[models.script]\ninput = 3.0\noutput = 15.0\n")
    client = EditorClient()

    async def scenario() -> None:
        async with agent(client, ws, tmp_path) as (conn, _proc):
            await start(conn, fs=False)
            sid = (await conn.new_session(cwd=str(ws), mcp_servers=[])).session_id
            for text in ("one", "two"):
                await conn.prompt(session_id=sid, prompt=[text_block(text)])
            costs = [(u.cost.amount, u.cost.currency) for u in client.of("usage_update")]
            assert costs == [(4.5, "USD"), (9.0, "USD")]
            assert client.of("usage_update")[0].used == 1_100_000

            await conn.close_session(session_id=sid)
            client.updates.clear()
            await conn.resume_session(session_id=sid, cwd=str(ws), mcp_servers=[])
            await conn.prompt(session_id=sid, prompt=[text_block("three")])
            # The turns before the resume count: the figure is the session's, not this run's.
            assert [u.cost.amount for u in client.of("usage_update")] == [13.5]

    run(scenario())


def test_a_mode_chosen_during_a_turn_applies_when_the_turn_ends(tmp_path: Path) -> None:
    turns: list[dict[str, Any]] = [
        {"blocks": [{"type": "tool_use", "name": "bash", "input": {"command": "touch gone"}}]},
        {"blocks": [{"type": "text", "text": "never reached"}]},
    ]
    ws = make_workspace(tmp_path, ASK_EDITS, turns)
    client = EditorClient(answer=None)

    async def scenario() -> str:
        async with agent(client, ws, tmp_path) as (conn, _proc):
            await start(conn, fs=False)
            sid = (await conn.new_session(cwd=str(ws), mcp_servers=[])).session_id
            prompt = asyncio.ensure_future(
                conn.prompt(session_id=sid, prompt=[text_block("run it")])
            )
            await asyncio.wait_for(client.asked.wait(), 30)
            # ACP lets the mode change at any point: accepted now, applied after the turn
            # (which holds the session and keeps its preset).
            await conn.set_session_mode(session_id=sid, mode_id="explore")
            answer = await conn.set_config_option(session_id=sid, config_id="mode", value="plan")
            assert {o.id: o.current_value for o in answer.config_options}["mode"] == "plan"
            assert [u.current_mode_id for u in client.of("current_mode_update")] == [
                "explore",
                "plan",
            ]
            assert not [e for e in stored_events(ws, sid) if type(e).__name__ == "SettingsChanged"]
            await conn.cancel(session_id=sid)
            client.release.set()
            assert (await prompt).stop_reason == "cancelled"
            loaded = await conn.load_session(session_id=sid, cwd=str(ws), mcp_servers=[])
            assert loaded.modes.current_mode_id == "plan"
            return str(sid)

    sid = run(scenario())
    kinds = [type(e).__name__ for e in stored_events(ws, sid)]
    # One change, the last choice, recorded after the cancelled turn.
    assert kinds.count("SettingsChanged") == 1
    assert kinds.index("TurnCancelled") < kinds.index("SettingsChanged")
    [changed] = [e for e in stored_events(ws, sid) if type(e).__name__ == "SettingsChanged"]
    assert changed.agent == "plan"


PNG_1PX = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAC"
    "hwGA60e6kgAAAABJRU5ErkJggg=="
)


def test_image_content_goes_into_the_user_message(tmp_path: Path) -> None:
    turns: list[dict[str, Any]] = [{"blocks": [{"type": "text", "text": "A pixel."}]}] * 2
    ws = make_workspace(tmp_path, "", turns)
    client = EditorClient()

    async def scenario() -> str:
        async with agent(client, ws, tmp_path) as (conn, _proc):
            init = await start(conn, fs=False)
            assert init.agent_capabilities.prompt_capabilities.image
            sid = (await conn.new_session(cwd=str(ws), mcp_servers=[])).session_id
            # The declared type is not trusted: the bytes say PNG.
            picture = image_block(PNG_1PX, "image/jpeg")
            await conn.prompt(session_id=sid, prompt=[text_block("what is it?"), picture])
            assert client.text() == "A pixel."
            for bad in (
                image_block("bm90IGFuIGltYWdl", "image/png"),
                image_block("%%", "image/png"),
            ):
                with pytest.raises(RequestError) as refused:
                    await conn.prompt(session_id=sid, prompt=[text_block("and this?"), bad])
                assert "image" in str(refused.value.data)
            return str(sid)

    sid = run(scenario())
    [message] = [e for e in stored_events(ws, sid) if type(e).__name__ == "UserMessageAdded"]
    text, image = message.content
    assert text == {"type": "text", "text": "what is it?"}
    assert image["type"] == "image" and image["media_type"] == "image/png" and image["size"] == 70
