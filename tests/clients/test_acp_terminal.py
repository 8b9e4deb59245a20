"""``bash`` through the client's terminal (ACP ``terminal/*``): a client that advertises
``terminal: true`` and really runs what it is asked to, against a ``coder-es acp`` subprocess."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path
from typing import Any, cast

import pytest
from acp import PROTOCOL_VERSION, Client, spawn_agent_process, text_block
from acp.schema import (
    ClientCapabilities,
    CreateTerminalResponse,
    FileSystemCapabilities,
    KillTerminalResponse,
    ReleaseTerminalResponse,
    TerminalExitStatus,
    TerminalOutputResponse,
    WaitForTerminalExitResponse,
)
from client_helpers import REPO, child_env, cli, make_workspace, run, stored_events
from test_acp import EditorClient

from coder_es.sandbox import SandboxSettings, availability


class _Term:
    def __init__(self, proc: asyncio.subprocess.Process, limit: int | None) -> None:
        self.proc = proc
        self.limit = limit
        self.output = bytearray()
        self.truncated = False
        self.pump = asyncio.ensure_future(self._pump())

    async def _pump(self) -> None:
        assert self.proc.stdout is not None
        while chunk := await self.proc.stdout.read(65536):
            self.output += chunk
            if self.limit is not None and len(self.output) > self.limit:
                del self.output[: len(self.output) - self.limit]
                self.truncated = True

    async def exited(self) -> TerminalExitStatus:
        code = await self.proc.wait()
        await self.pump
        if code < 0:
            return TerminalExitStatus(signal=signal.Signals(-code).name)
        return TerminalExitStatus(exit_code=code)


class TerminalClient(EditorClient):
    """An editor with terminals: each runs its command as a real process, stdout and stderr in
    one stream, and a kill sends SIGTERM (as a terminal closing its command would)."""

    def __init__(self, answer: str | None = "allow_once") -> None:
        super().__init__(answer)
        self.terminals: dict[str, _Term] = {}
        self.requests: list[tuple[str, Any]] = []
        self.created = asyncio.Event()
        self.ended_by_sigterm: list[bool] = []
        self.scripts: list[str] = []

    async def create_terminal(
        self,
        session_id: str,
        command: str,
        args: list[str] | None = None,
        env: list[Any] | None = None,
        cwd: str | None = None,
        output_byte_limit: int | None = None,
        **kwargs: Any,
    ) -> CreateTerminalResponse:
        self.requests.append(("create", (command, list(args or []), env, cwd)))
        # What the command runs, read while it exists (coder-es removes it after the run).
        script = Path(command)
        self.scripts.append(script.read_text() if script.name == "coder-es-run" else "")
        proc = await asyncio.create_subprocess_exec(
            command,
            *(args or []),
            cwd=cwd,
            env={
                **os.environ,
                "IN_CLIENT_TERMINAL": "terminal",
                **{e.name: e.value for e in env or []},
            },
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        tid = f"term-{len(self.terminals) + 1}"
        self.terminals[tid] = _Term(proc, output_byte_limit)
        self.created.set()
        return CreateTerminalResponse(terminal_id=tid)

    async def terminal_output(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> TerminalOutputResponse:
        self.requests.append(("output", terminal_id))
        term = self.terminals[terminal_id]
        status = await term.exited() if term.proc.returncode is not None else None
        return TerminalOutputResponse(
            output=term.output.decode("utf-8", "replace"),
            truncated=term.truncated,
            exit_status=status,
        )

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> WaitForTerminalExitResponse:
        self.requests.append(("wait", terminal_id))
        status = await self.terminals[terminal_id].exited()
        return WaitForTerminalExitResponse(exit_code=status.exit_code, signal=status.signal)

    async def kill_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> KillTerminalResponse:
        self.requests.append(("kill", terminal_id))
        proc = self.terminals[terminal_id].proc
        if proc.returncode is None:
            proc.terminate()
            # Whether SIGTERM alone ended the command (release would SIGKILL what is left).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), 5)
            self.ended_by_sigterm.append(proc.returncode is not None)
        return KillTerminalResponse()

    async def release_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> ReleaseTerminalResponse:
        self.requests.append(("release", terminal_id))
        term = self.terminals.pop(terminal_id)
        if term.proc.returncode is None:
            term.proc.kill()
        await term.exited()
        return ReleaseTerminalResponse()

    def methods(self) -> list[str]:
        return [name for name, _ in self.requests]

    def created_args(self) -> list[str]:
        [(command, args, _env, _cwd)] = [a for n, a in self.requests if n == "create"]
        return [command, *args]


def agent(client: EditorClient, ws: Path, tmp_path: Path, **env: str) -> Any:
    return spawn_agent_process(
        cast(Client, client),
        *cli(ws, "acp", "--script", str(tmp_path / "script.json"), "--no-watch"),
        env={**child_env(tmp_path), **env},
        cwd=str(REPO),
        use_unstable_protocol=True,
    )


async def start(conn: Any, terminal: bool = True) -> Any:
    caps = ClientCapabilities(
        fs=FileSystemCapabilities(read_text_file=False, write_text_file=False), terminal=terminal
    )
    return await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=caps)


def bash_turns(command: str, **extra: Any) -> list[dict[str, Any]]:
    return [
        {
            "blocks": [
                {"type": "tool_use", "name": "bash", "input": {"command": command, **extra}},
            ]
        },
        {"blocks": [{"type": "text", "text": "Ran it."}]},
    ]


def sandboxed(ws: Path) -> None:
    found = availability(SandboxSettings(), ws)
    if not found.active:
        pytest.skip(f"the namespace sandbox is unavailable here: {found.reason}")


def completed(ws: Path, sid: str) -> Any:
    [done] = [e for e in stored_events(ws, sid) if type(e).__name__ == "ToolCallCompleted"]
    return done


def terminal_contents(client: EditorClient) -> list[list[str]]:
    """Per tool_call_update with content: the terminal ids it embeds."""
    return [
        [c.terminal_id for c in u.content if c.type == "terminal"]
        for u in client.of("tool_call_update")
        if u.content
    ]


def alive(token: str) -> bool:
    """Whether a process whose command line holds ``token`` runs (in any PID namespace)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if token in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    return True
            except OSError:
                continue
    return False


def test_bash_runs_in_the_client_terminal_and_a_rewind_restores_its_changes(
    tmp_path: Path,
) -> None:
    command = "echo made > made.txt && echo out && echo err >&2"
    ws = make_workspace(tmp_path, "", bash_turns(command))
    sandboxed(ws)
    client = TerminalClient()

    async def scenario() -> str:
        async with agent(client, ws, tmp_path) as (conn, _proc):
            await start(conn)
            sid = (await conn.new_session(cwd=str(ws), mcp_servers=[])).session_id
            response = await conn.prompt(session_id=sid, prompt=[text_block("make it")])
            assert response.stop_reason == "end_turn"

            # The client ran the sandbox's command line (the user's command inside it) in the
            # workspace, then was asked for the output and to release the terminal.
            # The client is shown the model's command, not the 2 KB wrapper around it (issue 32):
            # a small script whose one argument is the command; the sandbox is in the script.
            argv = client.created_args()
            assert Path(argv[0]).name == "coder-es-run" and argv[1:] == [command]
            assert "unshare" in client.scripts[0] and not Path(argv[0]).exists()
            [(_c, _a, env, cwd)] = [a for n, a in client.requests if n == "create"]
            assert cwd == str(ws) and {e.name: e.value for e in env}["PAGER"] == "cat"
            assert client.methods() == ["create", "wait", "output", "release"]
            assert (ws / "made.txt").read_text() == "made\n"

            # The terminal is in the tool call while it runs and once it is done.
            assert terminal_contents(client) == [["term-1"], ["term-1"]]
            final = client.of("tool_call_update")[-1]
            assert final.status == "completed"
            assert "[exit code 0]" in final.raw_output["output"]
            assert [c.type for c in final.content] == ["terminal", "diff", "content"]
            assert "made.txt (created)" in final.content[-1].content.text

            # A rewind to before the command takes its file away.
            client.updates.clear()
            await conn.prompt(session_id=sid, prompt=[text_block("/tree")])
            tree = client.text()
            user = next(line.split()[0] for line in tree.splitlines() if "user make it" in line)
            client.updates.clear()
            await conn.prompt(session_id=sid, prompt=[text_block(f"/rewind {user}")])
            assert not (ws / "made.txt").exists()
            return str(sid)

    sid = run(scenario())
    # Recorded as a local command's result: the output, the exit code, the files it changed.
    done = completed(ws, sid)
    assert not done.is_error
    assert done.output.splitlines() == [
        "out",
        "err",
        "[exit code 0]",
        "[files changed: made.txt (created)]",
    ]
    assert [(c["path"], c["before"], c["outcome"]) for c in done.files_changed] == [
        ("made.txt", None, "direct")
    ]


def test_plan_mode_cannot_write_through_the_client_terminal(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path, "", bash_turns("touch made"))
    sandboxed(ws)
    client = TerminalClient()

    async def scenario() -> str:
        async with agent(client, ws, tmp_path) as (conn, _proc):
            await start(conn)
            sid = (await conn.new_session(cwd=str(ws), mcp_servers=[])).session_id
            await conn.set_session_mode(session_id=sid, mode_id="plan")
            await conn.prompt(session_id=sid, prompt=[text_block("try")])
            # The permission rules judged the user's command, not the wrapper around it.
            [(question, _kinds)] = client.questions
            assert question.raw_input == {"command": "touch made"}
            assert "unshare" in client.scripts[0]
            return str(sid)

    sid = run(scenario())
    assert not (ws / "made").exists()
    done = completed(ws, sid)
    assert done.is_error and "Read-only file system" in done.output
    assert "[read-only:" in done.output and done.files_changed == []


def test_a_client_without_terminals_gets_local_bash(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path, "", bash_turns("echo here > here.txt"))
    client = TerminalClient()

    async def scenario() -> str:
        async with agent(client, ws, tmp_path) as (conn, _proc):
            await start(conn, terminal=False)
            sid = (await conn.new_session(cwd=str(ws), mcp_servers=[])).session_id
            await conn.prompt(session_id=sid, prompt=[text_block("go")])
            assert client.requests == []
            assert all(ids == [] for ids in terminal_contents(client))
            return str(sid)

    sid = run(scenario())
    assert (ws / "here.txt").read_text() == "here\n"
    assert [c["path"] for c in completed(ws, sid).files_changed] == ["here.txt"]


@pytest.mark.parametrize("mode", ["sandbox", "fallback"])
def test_cancel_kills_the_command_in_the_client_terminal(tmp_path: Path, mode: str) -> None:
    token = "31.7"
    # A background job too: the kill reaches the command's whole process group.
    command = f"sleep {token} & sleep {token}; echo late > late.txt"
    ws = make_workspace(tmp_path, "", bash_turns(command))
    env = {}
    if mode == "sandbox":
        sandboxed(ws)
    else:
        env["CODER_ES_SANDBOX"] = "off"
    client = TerminalClient()

    async def scenario() -> None:
        async with agent(client, ws, tmp_path, **env) as (conn, _proc):
            await start(conn)
            sid = (await conn.new_session(cwd=str(ws), mcp_servers=[])).session_id
            prompt = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=[text_block("wait")]))
            await asyncio.wait_for(client.created.wait(), 30)
            for _ in range(100):
                if alive(f"sleep {token}"):
                    break
                await asyncio.sleep(0.05)
            assert alive(f"sleep {token}")
            await conn.cancel(session_id=sid)
            assert (await prompt).stop_reason == "cancelled"
            assert client.methods()[-2:] == ["kill", "release"]
            assert client.ended_by_sigterm == [True]
            assert not client.terminals
            # The kill reached the command (inside the sandbox's PID namespace) and its job.
            for _ in range(100):
                if not alive(f"sleep {token}"):
                    break
                await asyncio.sleep(0.05)
            assert not alive(f"sleep {token}")

    run(scenario())
    assert not (ws / "late.txt").exists()


def test_a_timeout_kills_the_terminal_command_and_says_so(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path, "", bash_turns("echo begun; sleep 30.9", timeout_ms=1500))
    sandboxed(ws)
    client = TerminalClient()

    async def scenario() -> str:
        async with agent(client, ws, tmp_path) as (conn, _proc):
            await start(conn)
            sid = (await conn.new_session(cwd=str(ws), mcp_servers=[])).session_id
            await conn.prompt(session_id=sid, prompt=[text_block("wait")])
            assert client.methods() == ["create", "wait", "kill", "wait", "output", "release"]
            assert client.ended_by_sigterm == [True]
            assert not alive("sleep 30.9")
            return str(sid)

    done = completed(ws, run(scenario()))
    assert done.is_error
    assert done.output.splitlines() == [
        "begun",
        "[timed out after 1500 ms; everything it started was killed]",
    ]


def test_the_fallback_runs_the_plain_command_in_the_terminal(tmp_path: Path) -> None:
    # More output than the terminal keeps: the tail stays, and the result says so.
    command = "echo x > x.txt && head -c 2500000 /dev/zero | tr '\\0' a && echo && echo tail"
    ws = make_workspace(tmp_path, "", bash_turns(command))
    client = TerminalClient()

    async def scenario() -> str:
        async with agent(client, ws, tmp_path, CODER_ES_SANDBOX="off") as (conn, _proc):
            await start(conn)
            sid = (await conn.new_session(cwd=str(ws), mcp_servers=[])).session_id
            await conn.prompt(session_id=sid, prompt=[text_block("go")])
            argv = client.created_args()
            assert "unshare" not in client.scripts[0] and argv[1:] == [command]
            return str(sid)

    done = completed(ws, run(scenario()))
    assert (ws / "x.txt").read_text() == "x\n"
    assert [c["path"] for c in done.files_changed] == ["x.txt"]
    assert done.output.startswith("[... the terminal kept only the last 2097152 bytes")
    assert done.output.endswith("tail\n[exit code 0]\n[files changed: x.txt (created)]")


def test_a_subagent_command_runs_here(tmp_path: Path) -> None:
    """The client is not shown a child session's calls: their commands run locally. (Each
    provider of this process plays the script from its start: the child's first turn is a
    ``task`` call it is not offered, then the command; the parent's next turn is the same
    command.)"""
    command = 'echo "${IN_CLIENT_TERMINAL:-here}" >> runs.txt'
    turns: list[dict[str, Any]] = [
        {
            "blocks": [
                {
                    "type": "tool_use",
                    "name": "task",
                    "input": {"description": "run", "prompt": "run it", "agent": "general"},
                }
            ]
        },
        *bash_turns(command),
    ]
    ws = make_workspace(tmp_path, "", [*turns, {"blocks": [{"type": "text", "text": "end"}]}])
    client = TerminalClient()

    script = str(tmp_path / "script.json")

    async def scenario() -> None:
        # The child's provider is made by name: CODER_ES_SCRIPT gives it the script.
        async with agent(client, ws, tmp_path, CODER_ES_SCRIPT=script) as (conn, _proc):
            await start(conn)
            sid = (await conn.new_session(cwd=str(ws), mcp_servers=[])).session_id
            await conn.prompt(session_id=sid, prompt=[text_block("delegate")])
            assert client.methods().count("create") == 1

    run(scenario())
    # The child's command ran here, the parent's in the client's terminal.
    assert (ws / "runs.txt").read_text() == "here\nterminal\n"


class ElsewhereClient(TerminalClient):
    """A client whose terminals run somewhere else: the command it was given never starts."""

    async def create_terminal(self, session_id: str, command: str, **kwargs: Any) -> Any:
        return await super().create_terminal(
            session_id, "/bin/sh", args=["-c", "echo not this machine"], cwd=kwargs.get("cwd")
        )


def test_a_terminal_that_never_starts_the_sandbox_is_an_error_not_a_hang(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path, "", bash_turns("echo hi > hi.txt"))
    sandboxed(ws)
    client = ElsewhereClient()

    async def scenario() -> str:
        async with agent(client, ws, tmp_path) as (conn, _proc):
            await start(conn)
            sid = (await conn.new_session(cwd=str(ws), mcp_servers=[])).session_id
            await conn.prompt(session_id=sid, prompt=[text_block("go")])
            assert client.methods() == ["create", "wait", "output", "release"]
            final = client.of("tool_call_update")[-1]
            assert [c.type for c in final.content] == ["terminal", "content"]
            assert final.content[1].content.text.startswith("the command did not run")
            return str(sid)

    done = completed(ws, run(scenario(), timeout=30))
    assert done.is_error and not (ws / "hi.txt").exists()
    assert done.output.startswith("the command did not run")
    assert "not this machine" in done.output
