"""Search from the client surfaces: ACP ``session/list`` with ``_meta.query`` and the WebSocket
``search`` message, on a session recorded through them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
import websockets
from acp import RequestError, text_block
from client_helpers import make_workspace, run, serve_process
from test_acp import EditorClient, agent, start
from test_ws import recv, send, until

ALLOW_BASH = '[permissions.rules]\nbash = "allow"\n'
TURNS: list[dict[str, Any]] = [
    {
        "blocks": [
            {"type": "text", "text": "Checking the quokka."},
            {"type": "tool_use", "name": "bash", "input": {"command": "echo marsupial"}},
        ]
    },
    {"blocks": [{"type": "text", "text": "Done."}]},
]


def test_websocket_search_message(tmp_path: Path) -> None:
    ws_dir = make_workspace(tmp_path, ALLOW_BASH, TURNS)

    async def scenario() -> None:
        async with serve_process(ws_dir, tmp_path) as (url, _proc), websockets.connect(url) as ws:
            hello = await recv(ws)
            await send(ws, type="send_message", text="look at the wombat")
            await until(ws, "finished", [])
            await send(ws, type="search", id="q1", query="quokka")
            found = await until(ws, "search_results", [])
            assert found["re"] == "q1"
            assert [(h["session"], h["kind"]) for h in found["hits"]] == [
                (hello["session_id"], "assistant")
            ]
            await send(ws, type="search", id="q2", query="marsupial", kind="tool")
            tool = await until(ws, "search_results", [])
            # The command (on the response's node) and its output (on the result's node).
            assert [h["kind"] for h in tool["hits"]] == ["tool", "tool"]
            assert len({h["node"] for h in tool["hits"]}) == 2
            for bad in ({"query": '"'}, {"query": "x", "kind": "nope"}, {"query": 3}):
                await send(ws, type="search", id="bad", **bad)
                error = await until(ws, "error", [])
                assert error["re"] == "bad" and not error.get("fatal")
            await send(ws, type="search", id="q3", query="AND( wombat")
            assert (await until(ws, "search_results", []))["hits"] == []

    run(scenario())


def test_acp_session_list_with_a_query(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path, ALLOW_BASH, TURNS)
    client = EditorClient(answer=None)

    async def scenario() -> None:
        async with agent(cast(Any, client), ws, tmp_path) as (conn, _proc):
            await start(conn)
            new = await conn.new_session(cwd=str(ws), mcp_servers=[])
            await conn.prompt(session_id=new.session_id, prompt=[text_block("the wombat")])
            await conn.new_session(cwd=str(ws), mcp_servers=[])
            everything = await conn.list_sessions(cwd=str(ws))
            assert len(everything.sessions) == 2
            matching = await conn.list_sessions(cwd=str(ws), query="quokka")
            assert [s.session_id for s in matching.sessions] == [new.session_id]
            hits = matching.sessions[0].field_meta["coderEs"]["hits"]
            assert hits[0]["kind"] == "assistant" and "quokka" in hits[0]["snippet"]
            assert (await conn.list_sessions(query="unheard-of words")).sessions == []
            with pytest.raises(RequestError):
                await conn.list_sessions(query='"')

    run(scenario())
