"""What real ACP clients (acpx, Toad, ``acp-client``) showed their users of ``coder-es acp``
(issue 32, item 4), each reproduced through the ``acp`` package's client side."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from acp import RequestError, text_block
from client_helpers import make_workspace, run
from test_acp import ASK_EDITS, EditorClient, agent, start

ANSWER = [{"blocks": [{"type": "text", "text": "First answer."}]}] * 3


def test_error_reasons_are_the_message_and_command_mistakes_are_answers(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path, ASK_EDITS, ANSWER)
    client = EditorClient()

    async def scenario() -> None:
        async with agent(client, ws, tmp_path) as (conn, _proc):
            await start(conn, fs=False)
            try:
                await conn.new_session(cwd="relative/dir", mcp_servers=[])
            except RequestError as e:
                # acpx and acp-client print only the message.
                assert "absolute" in str(e), str(e)
            else:
                raise AssertionError("a relative cwd must be refused")
            new = await conn.new_session(cwd=str(ws), mcp_servers=[])
            for bad in ("/rewind", "/rewind 9999", "/diff"):
                client.updates.clear()
                response = await conn.prompt(session_id=new.session_id, prompt=[text_block(bad)])
                assert response.stop_reason == "end_turn"
                assert bad.split()[0] in client.text()

    run(scenario())


WRITE_THEN_ANSWER: list[dict[str, Any]] = [
    {
        "blocks": [
            {"type": "tool_use", "name": "write", "input": {"path": "a.txt", "content": "a\n"}}
        ]
    },
    {"blocks": [{"type": "text", "text": "Wrote a.txt."}]},
]


def _is_code_block(text: str) -> bool:
    return text.startswith("```\n") and text.endswith("\n```")


def test_tree_search_diff_and_rewind_summaries_are_code_blocks(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path, ASK_EDITS, WRITE_THEN_ANSWER)
    client = EditorClient()

    async def say(conn: Any, sid: str, text: str) -> str:
        client.updates.clear()
        await conn.prompt(session_id=sid, prompt=[text_block(text)])
        return client.text()

    async def scenario() -> None:
        async with agent(client, ws, tmp_path) as (conn, _proc):
            await start(conn, fs=False)
            sid = (await conn.new_session(cwd=str(ws), mcp_servers=[])).session_id
            await say(conn, sid, "write it")
            tree = await say(conn, sid, "/tree")
            assert _is_code_block(tree), tree
            node = next(line.split()[0] for line in tree.splitlines() if "user write it" in line)
            assert _is_code_block(await say(conn, sid, "/search write"))
            assert _is_code_block(await say(conn, sid, f"/diff {node}"))
            summary = await say(conn, sid, f"/rewind {node}")
            head, _, files = summary.partition("\n\n")
            assert f"-> {node}" in head and _is_code_block(files), summary
            assert "a.txt" in files

    run(scenario())
