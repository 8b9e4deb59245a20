"""What real ACP clients (acpx, Toad, ``acp-client``) showed their users of ``coder-es acp``
(issue 32, item 4), each reproduced through the ``acp`` package's client side."""

from __future__ import annotations

from pathlib import Path

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
