"""``coder-es acp`` driven as a subprocess through the ``acp`` package's own client side."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any, cast

from acp import PROTOCOL_VERSION, Client, RequestError, spawn_agent_process, text_block
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    DeniedOutcome,
    FileSystemCapabilities,
    ReadTextFileResponse,
    RequestPermissionResponse,
    WriteTextFileResponse,
)
from client_helpers import REPO, child_env, cli, kinds, make_workspace, run, stored_events

EDGE = REPO / "tests" / "mcp" / "edge_server.py"

ASK_EDITS = '[permissions.rules]\nwrite = "ask"\nedit = "ask"\nbash = "ask"\n'

WRITE_TURNS: list[dict[str, Any]] = [
    {
        "blocks": [
            {"type": "thinking", "thinking": "The file must be written.", "signature": "s"},
            {"type": "text", "text": "Writing hello.txt."},
            {
                "type": "tool_use",
                "name": "write",
                "input": {"path": "hello.txt", "content": "hi\n"},
            },
        ]
    },
    {"blocks": [{"type": "text", "text": "Done writing."}]},
]


class EditorClient:
    """An editor: records updates, answers permissions as told, serves files from buffers."""

    def __init__(self, answer: str | None = "allow_once") -> None:
        self.updates: list[Any] = []
        self.buffers: dict[str, str] = {}
        self.writes: list[tuple[str, str]] = []
        self.answer = answer
        self.questions: list[Any] = []
        self.asked = asyncio.Event()
        self.release = asyncio.Event()
        self.on_ask: Any = None

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any
    ) -> RequestPermissionResponse:
        self.questions.append((tool_call, [o.kind for o in options]))
        self.asked.set()
        if self.on_ask is not None:
            self.on_ask()
        if self.answer is None:  # wait for the test to cancel the turn
            await self.release.wait()
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=self.answer)
        )

    async def read_text_file(
        self,
        session_id: str,
        path: str,
        line: int | None = None,
        limit: int | None = None,
        **kwargs: Any,
    ) -> ReadTextFileResponse:
        if path in self.buffers:
            return ReadTextFileResponse(content=self.buffers[path])
        if Path(path).is_file():
            return ReadTextFileResponse(content=Path(path).read_text())
        raise RequestError.resource_not_found(path)

    async def write_text_file(
        self, session_id: str, path: str, content: str, **kwargs: Any
    ) -> WriteTextFileResponse:
        self.writes.append((path, content))
        self.buffers[path] = content
        return WriteTextFileResponse()

    def of(self, kind: str) -> list[Any]:
        return [u for u in self.updates if u.session_update == kind]

    def text(self, kind: str = "agent_message_chunk") -> str:
        return "".join(u.content.text for u in self.of(kind))


def agent(client: EditorClient, ws: Path, tmp_path: Path) -> Any:
    return spawn_agent_process(
        cast(Client, client),
        *cli(ws, "acp", "--script", str(tmp_path / "script.json"), "--no-watch"),
        env=child_env(tmp_path),
        cwd=str(REPO),
        use_unstable_protocol=True,
    )


async def start(conn: Any, fs: bool = True) -> Any:
    caps = ClientCapabilities(fs=FileSystemCapabilities(read_text_file=fs, write_text_file=fs))
    return await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=caps)


def test_prompt_streams_asks_permission_and_load_replays_history(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path, ASK_EDITS, WRITE_TURNS)
    client = EditorClient(answer="allow_always")
    target = str(ws / "hello.txt")

    async def scenario() -> str:
        async with agent(client, ws, tmp_path) as (conn, _proc):
            init = await start(conn)
            caps = init.agent_capabilities
            assert caps.load_session and caps.prompt_capabilities.embedded_context
            assert caps.session_capabilities.fork is not None
            # A real MCP server (tests/mcp/edge_server.py), with a secret in its environment.
            env = [{"name": "EDGE_TOKEN", "value": "s3cr3t-edge-token-value"}]
            mcp = [{"name": "docs", "command": sys.executable, "args": [str(EDGE)], "env": env}]
            new = await conn.new_session(cwd=str(ws), mcp_servers=mcp)
            assert [s["name"] for s in new.field_meta["coderEs"]["mcpServers"]] == ["docs"]
            response = await conn.prompt(session_id=new.session_id, prompt=[text_block("go")])
            assert response.stop_reason == "end_turn"

            # Live: thinking and text chunks, then the call, asked about, run, with its diff.
            assert client.text("agent_thought_chunk") == "The file must be written."
            assert client.text() == "Writing hello.txt.Done writing."
            (start_call,) = client.of("tool_call")
            assert start_call.kind == "edit" and start_call.status == "pending"
            assert start_call.locations[0].path == target
            ((tool_call, option_kinds),) = client.questions
            assert option_kinds == ["allow_once", "allow_always", "reject_once", "reject_always"]
            assert tool_call.content[0].new_text == "hi\n"
            statuses = [u.status for u in client.of("tool_call_update") if u.status]
            assert statuses == ["in_progress", "completed"]
            done = client.of("tool_call_update")[-1]
            assert done.content[0].type == "diff" and done.content[0].new_text == "hi\n"
            # The edit went through the editor's buffer, not behind its back to the disk.
            assert client.writes == [(target, "hi\n")]
            assert not (ws / "hello.txt").exists()
            commands = client.of("available_commands_update")
            assert {c.name for c in commands[0].available_commands} >= {"fork", "rewind", "tree"}

            client.updates.clear()
            await conn.load_session(cwd=str(ws), session_id=new.session_id, mcp_servers=[])
            replayed = [u.session_update for u in client.updates]
            assert replayed[:6] == [
                "user_message_chunk",
                "agent_thought_chunk",
                "agent_message_chunk",
                "tool_call",
                "tool_call_update",
                "agent_message_chunk",
            ]
            assert client.updates[0].content.text == "go"
            assert client.updates[4].status == "completed"
            return new.session_id

    sid = run(scenario())
    events = stored_events(ws, sid)
    decided = [e for e in events if type(e).__name__ == "PermissionDecided"]
    assert [(e.decision, e.scope, e.decided_by) for e in decided] == [("allow", "always", "client")]
    # The client's MCP servers are part of the session's record, the env values are not.
    assert [s["name"] for s in events[0].settings["mcp_servers"]] == ["docs"]
    assert events[0].settings["mcp_servers"][0]["env"] == ["EDGE_TOKEN"]
    assert "s3cr3t-edge-token-value" not in repr([vars(e) for e in events])
    # Its tools were offered to the model for that session.
    [listed] = [e for e in events if type(e).__name__ == "McpToolsListed"]
    assert listed.servers[0]["status"] == "ready"
    assert "mcp__docs__echo" in [t["name"] for t in listed.servers[0]["tools"]]


def test_edit_merges_with_unsaved_editor_buffer(tmp_path: Path) -> None:
    turns: list[dict[str, Any]] = [
        {"blocks": [{"type": "tool_use", "name": "read", "input": {"path": "notes.txt"}}]},
        {
            "blocks": [
                {
                    "type": "tool_use",
                    "name": "edit",
                    "input": {"path": "notes.txt", "old_string": "one", "new_string": "ONE"},
                }
            ]
        },
        {"blocks": [{"type": "text", "text": "Edited."}]},
    ]
    ws = make_workspace(tmp_path, ASK_EDITS, turns)
    (ws / "notes.txt").write_text("one\ntwo\nthree\n")
    client = EditorClient()
    path = str(ws / "notes.txt")
    client.buffers[path] = "one\ntwo\nthree\n"

    async def scenario() -> None:
        async with agent(client, ws, tmp_path) as (conn, _proc):
            await start(conn)
            new = await conn.new_session(cwd=str(ws), mcp_servers=[])

            def user_types() -> None:
                # The user types in the editor (unsaved) while the agent waits for approval.
                client.buffers[path] = "one\ntwo\nthree, edited by the user\n"

            client.on_ask = user_types
            response = await conn.prompt(session_id=new.session_id, prompt=[text_block("edit")])
            assert response.stop_reason == "end_turn"

    run(scenario())
    # Both changes are in the buffer; the disk was never touched by the agent.
    assert client.writes == [(path, "ONE\ntwo\nthree, edited by the user\n")]
    assert (ws / "notes.txt").read_text() == "one\ntwo\nthree\n"
    sid = stored_events_sid(ws)
    edits = [e for e in stored_events(ws, sid) if type(e).__name__ == "EditApplied"]
    assert [e.outcome for e in edits] == ["merged"]


def stored_events_sid(ws: Path) -> str:
    from coder_es.application import CoderApp
    from coder_es.store.config import StoreConfig

    app = CoderApp(StoreConfig(backend="lmdb", path=ws / ".coder-es"))
    try:
        (summary,) = app.list_sessions()
        return str(summary.id)
    finally:
        app.close()


def test_cancel_resolves_pending_permission_and_returns_cancelled(tmp_path: Path) -> None:
    turns: list[dict[str, Any]] = [
        {"blocks": [{"type": "tool_use", "name": "bash", "input": {"command": "touch gone"}}]},
        {"blocks": [{"type": "text", "text": "never reached"}]},
    ]
    ws = make_workspace(tmp_path, ASK_EDITS, turns)
    client = EditorClient(answer=None)

    async def scenario() -> str:
        async with agent(client, ws, tmp_path) as (conn, _proc):
            await start(conn)
            new = await conn.new_session(cwd=str(ws), mcp_servers=[])
            prompt = asyncio.ensure_future(
                conn.prompt(session_id=new.session_id, prompt=[text_block("run it")])
            )
            await asyncio.wait_for(client.asked.wait(), 30)
            await conn.cancel(session_id=new.session_id)
            client.release.set()  # the client answers its pending request "cancelled"
            response = await prompt
            assert response.stop_reason == "cancelled"
            assert client.of("tool_call_update")[-1].status == "failed"
            return new.session_id

    sid = run(scenario())
    assert not (ws / "gone").exists()
    names = kinds(stored_events(ws, sid))
    assert "TurnCancelled" in names and "PermissionDecided" not in names


def test_slash_commands_and_session_fork(tmp_path: Path) -> None:
    turns = [{"blocks": [{"type": "text", "text": "First answer."}]}] * 2
    ws = make_workspace(tmp_path, ASK_EDITS, turns)
    client = EditorClient()

    async def scenario() -> None:
        async with agent(client, ws, tmp_path) as (conn, _proc):
            await start(conn, fs=False)
            new = await conn.new_session(cwd=str(ws), mcp_servers=[])
            sid = new.session_id
            await conn.prompt(session_id=sid, prompt=[text_block("first")])
            client.updates.clear()
            await conn.prompt(session_id=sid, prompt=[text_block("/tree")])
            tree = client.text()
            assert "user first" in tree and "<- HEAD" in tree
            user_node = next(line.split()[0] for line in tree.splitlines() if "user first" in line)

            client.updates.clear()
            await conn.prompt(session_id=sid, prompt=[text_block(f"/rewind {user_node}")])
            assert f"-> {user_node}" in client.text()
            # The next message continues from the rewound head (a new branch).
            client.updates.clear()
            await conn.prompt(session_id=sid, prompt=[text_block("second")])
            assert client.text() == "First answer."

            forked = await conn.fork_session(session_id=sid, cwd=str(ws), mcp_servers=[])
            assert forked.session_id != sid
            client.updates.clear()
            await conn.load_session(cwd=str(ws), session_id=forked.session_id, mcp_servers=[])
            users = [u.content.text for u in client.of("user_message_chunk")]
            assert users == ["first", "second"]

            client.updates.clear()
            # An unknown node is the user's mistake: answered, not a failed prompt.
            await conn.prompt(session_id=sid, prompt=[text_block("/rewind 9999")])
            assert "9999" in client.text()

    run(scenario())


def test_the_editor_buffer_path_never_writes_the_project_config(tmp_path: Path) -> None:
    # Issue 17: through the client's fs methods too, the agent cannot write .coder-es/**.
    turns: list[dict[str, Any]] = [
        {
            "blocks": [
                {
                    "type": "tool_use",
                    "name": "write",
                    "input": {"path": ".coder-es/config.toml", "content": 'default = "allow"\n'},
                }
            ]
        },
        {"blocks": [{"type": "text", "text": "Tried."}]},
    ]
    ws = make_workspace(tmp_path, "", turns)
    client = EditorClient(answer="allow_always")

    async def scenario() -> None:
        async with agent(client, ws, tmp_path) as (conn, _proc):
            await start(conn)
            new = await conn.new_session(cwd=str(ws), mcp_servers=[])
            response = await conn.prompt(session_id=new.session_id, prompt=[text_block("go")])
            assert response.stop_reason == "end_turn"

    run(scenario())
    assert client.writes == []
    assert (ws / ".coder-es" / "config.toml").read_text() == ""
    failed = [u for u in client.of("tool_call_update") if u.status == "failed"]
    assert len(failed) == 1 and "never written by the agent" in str(failed[0].content)
