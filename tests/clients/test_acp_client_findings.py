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


def test_a_replayed_call_without_result_is_not_left_pending(tmp_path: Path) -> None:
    # After /rewind to the node holding an unanswered call, session/load showed it spinning.
    from coder_es.clients import acp_mapping as m
    from coder_es.clients.history import TOOL_CALL, TOOL_RESULT, USER, HistoryItem

    def call(tid: str) -> HistoryItem:
        return HistoryItem(
            TOOL_CALL, "s", "2", tool_use_id=tid, name="bash", input={"command": "ls"}
        )

    items = [
        HistoryItem(USER, "s", "1", text="go"),
        call("t1"),
        HistoryItem(TOOL_RESULT, "s", "3", text="ok", tool_use_id="t1", name="bash"),
        call("t2"),
        HistoryItem(USER, "s", "5", text="again"),
        call("t3"),
    ]
    updates = m.replay(items, tmp_path, lambda h: b"")
    ended: dict[str, str] = {}
    for u in updates:
        if u.session_update == "tool_call_update" and u.status in ("completed", "failed"):
            ended[u.tool_call_id] = u.status
    assert ended == {"t1": "completed", "t2": "failed", "t3": "failed"}
    # t2 ends before the next user message, where its turn was over.
    kinds = [(u.session_update, getattr(u, "tool_call_id", None)) for u in updates]
    assert kinds.index(("tool_call_update", "t2")) < kinds.index(("user_message_chunk", None), 1)


def test_fork_new_session_says_what_it_does_to_the_files(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path, ASK_EDITS, WRITE_THEN_ANSWER)
    client = EditorClient()

    async def scenario() -> str:
        async with agent(client, ws, tmp_path) as (conn, _proc):
            await start(conn, fs=False)
            sid = (await conn.new_session(cwd=str(ws), mcp_servers=[])).session_id
            await conn.prompt(session_id=sid, prompt=[text_block("write it")])
            client.updates.clear()
            await conn.prompt(session_id=sid, prompt=[text_block("/tree")])
            tree = client.text()
            node = next(line.split()[0] for line in tree.splitlines() if "user write it" in line)
            assert (ws / "a.txt").exists()
            client.updates.clear()
            await conn.prompt(session_id=sid, prompt=[text_block(f"/fork --new-session {node}")])
            return client.text()

    said = run(scenario())
    # The new session starts at the node, in the shared working tree: a.txt is gone, and the
    # message says so instead of "this one is unchanged".
    assert not (ws / "a.txt").exists()
    assert "this one is unchanged" not in said
    assert "restored to node" in said and "a.txt" in said, said


class RefusingEditor(EditorClient):
    async def write_text_file(self, session_id: str, path: str, content: str, **kw: Any) -> Any:
        raise RequestError.internal_error({"details": "a.txt is read-only in this editor"})


def test_a_client_refusing_a_write_gives_the_model_its_reason(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path, ASK_EDITS, WRITE_THEN_ANSWER)
    client = RefusingEditor()

    async def scenario() -> None:
        async with agent(client, ws, tmp_path) as (conn, _proc):
            await start(conn)
            sid = (await conn.new_session(cwd=str(ws), mcp_servers=[])).session_id
            await conn.prompt(session_id=sid, prompt=[text_block("write it")])

    run(scenario())
    (failed,) = [u for u in client.of("tool_call_update") if u.status == "failed"]
    assert "read-only in this editor" in failed.raw_output["output"], failed.raw_output


EDIT_TURNS: list[dict[str, Any]] = [
    {"blocks": [{"type": "tool_use", "name": "read", "input": {"path": "greet.py"}}]},
    {
        "blocks": [
            {
                "type": "tool_use",
                "name": "edit",
                "input": {"path": "greet.py", "old_string": "Hello", "new_string": "Howdy"},
            }
        ]
    },
    {"blocks": [{"type": "text", "text": "Edited."}]},
]


def test_an_edit_diff_is_sent_once(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path, ASK_EDITS, EDIT_TURNS)
    (ws / "greet.py").write_text('print("Hello")\n')
    client = EditorClient()

    async def scenario() -> None:
        async with agent(client, ws, tmp_path) as (conn, _proc):
            await start(conn, fs=False)
            sid = (await conn.new_session(cwd=str(ws), mcp_servers=[])).session_id
            await conn.prompt(session_id=sid, prompt=[text_block("edit")])

    run(scenario())
    assert (ws / "greet.py").read_text() == 'print("Howdy")\n'
    (done,) = [
        u
        for u in client.of("tool_call_update")
        if u.status and u.content and any(c.type == "diff" for c in u.content)
    ]
    sent = done.model_dump_json()
    assert sent.count("+print") == 0 and sent.count("Howdy") == 1, sent


def test_an_edit_the_tool_will_refuse_is_not_asked_about(tmp_path: Path) -> None:
    unread = [EDIT_TURNS[1], {"blocks": [{"type": "text", "text": "Oh."}]}]
    ws = make_workspace(tmp_path, ASK_EDITS, unread)
    (ws / "greet.py").write_text('print("Hello")\n')
    client = EditorClient()

    async def scenario() -> None:
        async with agent(client, ws, tmp_path) as (conn, _proc):
            await start(conn)
            sid = (await conn.new_session(cwd=str(ws), mcp_servers=[])).session_id
            await conn.prompt(session_id=sid, prompt=[text_block("edit")])

    run(scenario())
    assert client.questions == []
    assert (ws / "greet.py").read_text() == 'print("Hello")\n' and client.writes == []
    (failed,) = [u for u in client.of("tool_call_update") if u.status == "failed"]
    assert "you have not read greet.py" in str(failed.raw_output), failed


class OrderedEditor(EditorClient):
    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple[str, str]] = []

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.log.append((update.session_update, getattr(update, "tool_call_id", "") or ""))
        await super().session_update(session_id, update, **kwargs)

    async def read_text_file(
        self,
        session_id: str,
        path: str,
        line: int | None = None,
        limit: int | None = None,
        **kwargs: Any,
    ) -> Any:
        self.log.append(("fs/read_text_file", path))
        return await super().read_text_file(session_id, path, line, limit, **kwargs)


def test_the_tool_call_is_announced_before_its_file_read(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path, ASK_EDITS, EDIT_TURNS)
    (ws / "greet.py").write_text('print("Hello")\n')
    client = OrderedEditor()

    async def scenario() -> None:
        async with agent(client, ws, tmp_path) as (conn, _proc):
            await start(conn)
            sid = (await conn.new_session(cwd=str(ws), mcp_servers=[])).session_id
            await conn.prompt(session_id=sid, prompt=[text_block("edit")])

    run(scenario())
    kinds = [k for k, _ in client.log]
    assert "fs/read_text_file" in kinds
    assert kinds.index("tool_call") < kinds.index("fs/read_text_file"), client.log
