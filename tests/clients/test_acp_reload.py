"""``coder-es acp`` reloads ``.coder-es/config.toml`` while it runs: a good edit changes the
permission rules without a restart (of the open sessions too), a broken one is reported and the
last good rules stay."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any, cast

from acp import PROTOCOL_VERSION, Client, spawn_agent_process, text_block
from acp.schema import ClientCapabilities, FileSystemCapabilities, RequestPermissionResponse
from client_helpers import (
    REPO,
    child_env,
    cli,
    make_workspace,
    run,
    stored_events,
    user_config_file,
)

DENY_WRITE = '[permissions.rules]\nwrite = "deny"\n'
ALLOW_WRITE = '[permissions.rules]\nwrite = "allow"\n'
BROKEN = '[permissions.rules\nwrite = "deny"\n'

# Every session gets a fresh scripted provider, which starts the script from its first turn; a
# session prompted twice goes on with the second write.
WRITE_TURN: list[dict[str, Any]] = [
    {
        "blocks": [
            {"type": "text", "text": "Writing hello.txt."},
            {
                "type": "tool_use",
                "name": "write",
                "input": {"path": "hello.txt", "content": "hi\n"},
            },
        ]
    },
    {"blocks": [{"type": "text", "text": "Done."}]},
]
TURNS = WRITE_TURN * 2


class Recorder:
    """An editor without file buffers (writes land on disk) that records what it is shown."""

    def __init__(self) -> None:
        self.updates: list[tuple[str, Any]] = []
        self.questions: list[Any] = []

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append((session_id, update))

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any
    ) -> RequestPermissionResponse:
        # Both configurations decide by rule: a question here means the rules were not applied.
        self.questions.append(tool_call)
        raise AssertionError(f"unexpected permission question for {tool_call.title}")

    def tool_statuses(self, session_id: str) -> list[str]:
        return [
            u.status
            for sid, u in self.updates
            if sid == session_id and u.session_update == "tool_call_update" and u.status
        ]


def replace_config(path: Path, text: str) -> None:
    # Atomic, so the watcher never loads a half-written file (an empty file is a valid config).
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


async def stderr_until(proc: Any, needle: str, timeout: float = 20, more: int = 0) -> list[str]:
    """Read the agent's stderr until a line holds ``needle``; returns it and ``more`` lines."""

    async def read() -> list[str]:
        seen: list[str] = []
        while True:
            line = (await proc.stderr.readline()).decode()
            if not line:
                raise AssertionError(f"stderr closed before {needle!r}: {''.join(seen)}")
            seen.append(line)
            if needle in line:
                return [line] + [(await proc.stderr.readline()).decode() for _ in range(more)]

    return await asyncio.wait_for(read(), timeout)


def test_acp_applies_a_good_edit_and_keeps_the_last_good_config_on_a_broken_one(
    tmp_path: Path,
) -> None:
    ws = make_workspace(tmp_path, "", TURNS)
    config = user_config_file(tmp_path, DENY_WRITE)
    written = ws / "hello.txt"
    client = Recorder()

    async def session_turn(conn: Any) -> str:
        new = await conn.new_session(cwd=str(ws), mcp_servers=[])
        response = await conn.prompt(session_id=new.session_id, prompt=[text_block("write")])
        assert response.stop_reason == "end_turn"
        return str(new.session_id)

    async def scenario() -> tuple[str, str, str, list[str]]:
        async with spawn_agent_process(
            cast(Client, client),
            *cli(ws, "acp", "--script", str(tmp_path / "script.json")),
            env=child_env(tmp_path),
            cwd=str(REPO),
            use_unstable_protocol=True,
        ) as (conn, proc):
            caps = ClientCapabilities(
                fs=FileSystemCapabilities(read_text_file=False, write_text_file=False)
            )
            await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=caps)

            denied = await session_turn(conn)
            assert client.tool_statuses(denied) == ["failed"]
            assert not written.exists()

            replace_config(config, ALLOW_WRITE)
            (reloaded,) = await stderr_until(proc, "configuration reloaded")
            assert "permissions" in reloaded
            # The session that was denied is still open: it now decides by the new rules.
            again = await conn.prompt(session_id=denied, prompt=[text_block("write again")])
            assert again.stop_reason == "end_turn"
            assert client.tool_statuses(denied) == ["failed", "in_progress", "completed"]
            assert written.read_text() == "hi\n"
            written.unlink()
            allowed = await session_turn(conn)
            assert client.tool_statuses(allowed) == ["in_progress", "completed"]
            assert written.read_text() == "hi\n"
            written.unlink()

            replace_config(config, BROKEN)
            # The message is the summary, then one line per problem.
            report = await stderr_until(proc, "configuration not reloaded", more=1)
            # The last good configuration (allow) still decides, without asking.
            kept = await session_turn(conn)
            assert client.tool_statuses(kept) == ["in_progress", "completed"]
            assert written.read_text() == "hi\n"
            return denied, allowed, kept, report

    denied, allowed, kept, report = run(scenario())
    assert client.questions == []
    assert "keeping the last good one" in report[0]
    # The problem itself names the file, so the user knows what to fix.
    assert "config.toml" in "".join(report), report

    def decisions(session_id: str) -> list[tuple[str, str]]:
        events = stored_events(ws, session_id)
        return [
            (e.decision, e.decided_by) for e in events if type(e).__name__ == "PermissionDecided"
        ]

    assert decisions(denied) == [("deny", "rule"), ("allow", "rule")]
    assert decisions(allowed) == [("allow", "rule")]
    assert decisions(kept) == [("allow", "rule")]

    def changes(session_id: str) -> list[tuple[Any, Any]]:
        events = stored_events(ws, session_id)
        return [(e.rules, e.default) for e in events if type(e).__name__ == "PermissionsChanged"]

    # The reload is recorded in the session that was open, once (the broken edit changed
    # nothing); a session started after it has the new rules from its start.
    assert [[r["action"] for r in rules] for rules, _ in changes(denied)] == [["allow"]]
    assert changes(allowed) == []
