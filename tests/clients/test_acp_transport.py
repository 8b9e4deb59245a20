"""``coder-es acp`` survives stray lines on stdin (issue 17, point 2).

The process is spawned for real and fed raw bytes: each bad line must get the JSON-RPC error the
spec names, with ``"id": null``, and a valid ``initialize`` sent afterwards must still be
answered.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from client_helpers import REPO, child_env, cli, make_workspace, run

from coder_es.clients.jsonrpc_guard import check_line

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 7,
    "method": "initialize",
    "params": {"protocolVersion": 1, "clientCapabilities": {}},
}

# (line, the error code it must get)
BAD_LINES: list[tuple[bytes, int]] = [
    (b'[{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}]', -32600),
    (b"[]", -32600),
    (b"42", -32600),
    (b"null", -32600),
    (b'"str"', -32600),
    (b"true", -32600),
    (b'{"jsonrpc": "2.0", "id": 3', -32700),
    (b"{not json at all", -32700),
    (b"\xff\xfe\x00garbage", -32700),
    (b"[" * 200_000, -32700),
    (b'{"jsonrpc": "2.0", "id": 4}', -32600),
    (b'{"jsonrpc": "2.0", "id": 5, "method": 12}', -32600),
    (b'{"jsonrpc": "2.0", "id": [1], "method": "initialize"}', -32600),
    (b'{"jsonrpc": "2.0", "id": 6, "method": "initialize", "params": "x"}', -32600),
    (b'{"id": 8, "method": "initialize", "params": {}}', -32600),
]


@pytest.mark.parametrize(("line", "code"), BAD_LINES, ids=lambda v: repr(v)[:30])
def test_check_line_names_the_spec_error(line: bytes, code: int) -> None:
    error = check_line(line)
    assert error is not None
    assert error["id"] is None
    assert error["error"]["code"] == code


def test_check_line_passes_requests_notifications_and_responses() -> None:
    for message in (
        INITIALIZE,
        {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s"}},
        {"jsonrpc": "2.0", "id": 0, "result": {"outcome": {"outcome": "cancelled"}}},
        {"jsonrpc": "2.0", "id": "a", "error": {"code": -1, "message": "no"}},
    ):
        assert check_line(json.dumps(message).encode()) is None


async def _exchange(tmp_path: Path, lines: list[bytes]) -> tuple[list[dict[str, Any]], str]:
    ws = make_workspace(tmp_path, "", [{"blocks": [{"type": "text", "text": "hi"}]}])
    proc = await asyncio.create_subprocess_exec(
        *cli(ws, "acp", "--script", str(tmp_path / "script.json"), "--no-watch"),
        env=child_env(tmp_path),
        cwd=str(REPO),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        limit=1 << 20,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        for line in lines:
            proc.stdin.write(line + b"\n")
        proc.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
        await proc.stdin.drain()
        answers: list[dict[str, Any]] = []
        while not answers or answers[-1].get("id") != INITIALIZE["id"]:
            raw = await asyncio.wait_for(proc.stdout.readline(), 30)
            assert raw, f"the agent ended; stderr: {(await proc.stderr.read()).decode()[-2000:]}"
            answers.append(json.loads(raw))
        assert proc.returncode is None, "the agent must keep running"
    finally:
        proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 20)
        except TimeoutError:
            proc.kill()
            await proc.wait()
    assert proc.stderr is not None
    return answers, (await proc.stderr.read()).decode()


def test_stray_lines_are_answered_and_the_agent_keeps_serving(tmp_path: Path) -> None:
    # A notification nobody routes gets no answer (JSON-RPC) and one log line.
    unknown = b'{"jsonrpc": "2.0", "method": "nope/notify", "params": {}}'
    answers, log = run(_exchange(tmp_path, [*(line for line, _ in BAD_LINES), unknown]))
    assert "Traceback" not in log and "nope/notify: Method not found" in log
    *errors, initialized = answers
    assert [e["error"]["code"] for e in errors] == [code for _, code in BAD_LINES]
    assert all(e["id"] is None and e["jsonrpc"] == "2.0" for e in errors)
    assert initialized["result"]["protocolVersion"] == 1


@pytest.mark.parametrize("stdout_kind", ["file", "pipe"])
def test_files_work_as_stdin_and_stdout(tmp_path: Path, stdout_kind: str) -> None:
    # `coder-es acp < requests.jsonl > out.jsonl`: asyncio's pipe transports refuse regular files.
    import subprocess

    ws = make_workspace(tmp_path, "", [{"blocks": [{"type": "text", "text": "hi"}]}])
    requests = tmp_path / "requests.jsonl"
    new_session = {
        "jsonrpc": "2.0",
        "id": 8,
        "method": "session/new",
        "params": {"cwd": str(ws), "mcpServers": []},
    }
    requests.write_bytes(
        b"".join(json.dumps(m).encode() + b"\n" for m in (INITIALIZE, new_session))
    )
    out = tmp_path / "out.jsonl"
    with requests.open("rb") as stdin, out.open("wb") as file_out:
        done = subprocess.run(
            cli(ws, "acp", "--script", str(tmp_path / "script.json"), "--no-watch"),
            env=child_env(tmp_path),
            cwd=str(REPO),
            stdin=stdin,
            stdout=file_out if stdout_kind == "file" else subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=240,  # generous: a loaded machine, not a hang, is what a lower bound catches
        )
    text = out.read_text() if stdout_kind == "file" else done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()
    answers = {m.get("id"): m for m in map(json.loads, text.splitlines())}
    assert answers[7]["result"]["protocolVersion"] == 1
    assert answers[8]["result"]["sessionId"]
