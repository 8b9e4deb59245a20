"""``session/delete`` (ACP schema 1.21, stable) hides a session from the lists and keeps its
record; a mode change is a ``SettingsChanged`` event that a later connection, ``coder-es
sessions`` and ``coder-es run --session`` see; ``session/list`` pages with a cursor."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from acp import RequestError, text_block
from client_helpers import REPO, child_env, cli, make_workspace, run, stored_events
from test_acp import WRITE_TURNS, EditorClient, agent, start

ANSWER: dict[str, Any] = {"blocks": [{"type": "text", "text": "Answer."}]}


def coder_es(ws: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        cli(ws, *args),
        env=child_env(tmp_path),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done


def listed(ws: Path, tmp_path: Path, *flags: str) -> list[dict[str, Any]]:
    out = coder_es(ws, tmp_path, "sessions", "--json", *flags).stdout
    return [json.loads(line) for line in out.splitlines()]


async def delete(conn: Any, session_id: str) -> Any:
    # The package's client side has no method for it (its router has no route either).
    return await conn._conn.send_request("session/delete", {"sessionId": session_id})


def test_delete_hides_a_session_from_every_list_and_keeps_its_record(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path, "", [ANSWER] * 4)
    client = EditorClient()

    async def scenario() -> tuple[str, str]:
        async with agent(client, ws, tmp_path) as (conn, _proc):
            init = await start(conn, fs=False)
            assert init.agent_capabilities.session_capabilities.delete is not None
            gone = (await conn.new_session(cwd=str(ws), mcp_servers=[])).session_id
            await conn.prompt(session_id=gone, prompt=[text_block("remember the quokka")])
            kept = (await conn.new_session(cwd=str(ws), mcp_servers=[])).session_id

            assert await delete(conn, gone) == {}
            assert [s.session_id for s in (await conn.list_sessions(cwd=str(ws))).sessions] == [
                kept
            ]
            # The session was open here: deleting it closed it.
            with pytest.raises(RequestError) as refused:
                await conn.prompt(session_id=gone, prompt=[text_block("again")])
            assert "not open" in str(refused.value.data)
            # Again, or a session that never existed: nothing to do, no error (the spec's SHOULD).
            assert await delete(conn, gone) == {}
            assert await delete(conn, "00000000-0000-0000-0000-000000000000") == {}
            assert await delete(conn, "not-a-session") == {}

            # Nothing was lost: loading it by its id replays its conversation.
            client.updates.clear()
            await conn.load_session(session_id=gone, cwd=str(ws), mcp_servers=[])
            assert "remember the quokka" in "".join(
                u.content.text for u in client.of("user_message_chunk")
            )
            return str(gone), str(kept)

    gone, kept = run(scenario())
    [archived] = [e for e in stored_events(ws, gone) if type(e).__name__ == "Archived"]
    assert archived.by == "client"
    # The CLI hides it too, lists it with --deleted, and --restore brings it back.
    assert [s["id"] for s in listed(ws, tmp_path)] == [kept]
    assert [(s["id"], s["deleted"]) for s in listed(ws, tmp_path, "--deleted")] == [(gone, True)]
    out = coder_es(ws, tmp_path, "sessions", "--restore", gone[:8]).stdout
    assert f"session {gone} restored" in out
    assert {s["id"] for s in listed(ws, tmp_path)} == {gone, kept}
    assert listed(ws, tmp_path, "--deleted") == []
    out = coder_es(ws, tmp_path, "sessions", "--delete", kept).stdout
    assert f"session {kept} deleted" in out
    assert [s["id"] for s in listed(ws, tmp_path)] == [gone]


def test_a_mode_change_is_recorded_and_every_later_opening_sees_it(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path, "", [ANSWER])
    client = EditorClient()

    async def first() -> str:
        async with agent(client, ws, tmp_path) as (conn, _proc):
            await start(conn, fs=False)
            sid = (await conn.new_session(cwd=str(ws), mcp_servers=[])).session_id
            await conn.prompt(session_id=sid, prompt=[text_block("hello")])
            await conn.set_session_mode(session_id=sid, mode_id="plan")
            # The same mode again records nothing.
            await conn.set_config_option(session_id=sid, config_id="mode", value="plan")
            return str(sid)

    sid = run(first())
    [changed] = [e for e in stored_events(ws, sid) if type(e).__name__ == "SettingsChanged"]
    assert (changed.agent, changed.provider) == ("plan", "scripted")
    assert changed.context_budget > 0

    async def second() -> None:
        # Another connection (another editor window, a restart) loads it in plan mode.
        async with agent(EditorClient(), ws, tmp_path) as (conn, _proc):
            await start(conn, fs=False)
            loaded = await conn.load_session(session_id=sid, cwd=str(ws), mcp_servers=[])
            assert loaded.modes.current_mode_id == "plan"
            options = {o.id: o.current_value for o in loaded.config_options}
            assert options["mode"] == "plan"
            resumed = await conn.resume_session(session_id=sid, cwd=str(ws), mcp_servers=[])
            assert resumed.modes.current_mode_id == "plan"

    run(second())
    assert [s["agent"] for s in listed(ws, tmp_path)] == ["plan"]

    # The CLI's resume runs it in plan mode too: the model's write is refused, nothing written.
    # (Each process plays its script from the start; the same file name is the same "model".)
    script = tmp_path / "cli" / "script.json"
    script.parent.mkdir()
    script.write_text(json.dumps({"turns": [*WRITE_TURNS, ANSWER]}))
    coder_es(ws, tmp_path, "run", "--session", sid, "--script", str(script), "write the greeting")
    assert not (ws / "hello.txt").exists()
    events = stored_events(ws, sid)
    [done] = [e for e in events if type(e).__name__ == "ToolCallCompleted"]
    assert done.is_error
    assert [e.agent for e in events if type(e).__name__ == "SettingsChanged"] == ["plan"]

    # resume --agent goes through the same event; from then on build holds.
    script.write_text(json.dumps({"turns": [ANSWER]}))
    coder_es(
        ws, tmp_path, "run", "--session", sid, "--script", str(script), "--agent", "build", "ok"
    )
    changes = [e.agent for e in stored_events(ws, sid) if type(e).__name__ == "SettingsChanged"]
    assert changes == ["plan", "build"]
    assert [s["agent"] for s in listed(ws, tmp_path)] == ["build"]


def test_session_list_pages_with_a_cursor_newest_first(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path, "", [ANSWER] * 4)
    client = EditorClient()

    async def scenario() -> None:
        async with agent(client, ws, tmp_path) as (conn, _proc):
            await start(conn, fs=False)
            made = [(await conn.new_session(cwd=str(ws), mcp_servers=[])).session_id for _ in "abc"]
            await conn.prompt(session_id=made[0], prompt=[text_block("hi")])
            first = await conn.list_sessions(cwd=str(ws), pageSize=2)
            assert [s.session_id for s in first.sessions] == made[:0:-1]
            assert first.next_cursor
            # A session deleted between two pages moves nothing: the cursor still holds.
            await delete(conn, made[1])
            rest = await conn.list_sessions(cwd=str(ws), cursor=first.next_cursor, pageSize=2)
            assert [s.session_id for s in rest.sessions] == [made[0]]
            assert rest.next_cursor is None
            # updatedAt is the last activity: the prompt came after the other sessions started.
            everything = await conn.list_sessions()
            times = {s.session_id: s.updated_at for s in everything.sessions}
            assert times[made[0]] > times[made[2]]
            for bad in (
                conn.list_sessions(cursor="bm9wZQ"),
                conn.list_sessions(cwd="relative/dir"),
                conn.list_sessions(pageSize=0),
            ):
                with pytest.raises(RequestError):
                    await bad

    run(scenario())
