"""Any ACP agent as a harness: coder-es is its ACP client.

The agent runs inside the turn's sandbox (its stdin is handed through the namespaces as an extra
file descriptor: the sandbox gives the command ``/dev/null``), and coder-es answers what it asks:

- ``session/update``: text, thoughts, tool calls and their results become the same stream events
  as the CLIs' (``coder_es.harness.stream``), so the session records them the same way;
- ``session/request_permission``: our rules decide (a read-only agent never gets a write or a
  command allowed; ``--yes`` allows once; otherwise the non-interactive run rejects, saying
  why), and the decision is recorded as ours are;
- ``fs/read_text_file`` / ``fs/write_text_file``: through the sandbox's own view of the files
  (``/proc/PID/root`` of its PID 1: the overlay), so a write lands in the turn's transaction,
  never on the workspace directly; a write outside the workspace is refused;
- ``terminal/*``: the command runs inside the same namespaces (``nsenter``), so its changes are
  the transaction's too.

A later turn continues the agent's session with ``session/resume`` when the agent offers it,
else ``session/load``. The agent does not exit at the end of a prompt: once the answer is in,
its process group is stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from acp import PROTOCOL_VERSION, RequestError
from acp.client.connection import ClientSideConnection
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    CreateTerminalResponse,
    DeniedOutcome,
    FileSystemCapabilities,
    Implementation,
    KillTerminalResponse,
    ReadTextFileResponse,
    ReleaseTerminalResponse,
    RequestPermissionResponse,
    TerminalExitStatus,
    TerminalOutputResponse,
    TextContentBlock,
    WaitForTerminalExitResponse,
    WriteTextFileResponse,
)

from coder_es.harness import stream as hs
from coder_es.harness.acp_shim import Asker, PermissionRule, settle


@dataclass
class _Terminal:
    proc: asyncio.subprocess.Process
    output: bytearray = field(default_factory=bytearray)
    limit: int | None = None
    pump: asyncio.Future[None] | None = None


class HarnessClient:
    """The ACP client side: what the agent asks of coder-es."""

    def __init__(
        self,
        on_event: Callable[[hs.HarnessEvent], Any],
        workspace: Path,
        sandbox_root: Callable[[], Path | None],
        sandbox_pid: Callable[[], int | None],
        rule: PermissionRule,
        record_decision: Callable[[str, str, str, bool, str, str], None],
        ask: Asker | None = None,
    ) -> None:
        self.ask = ask
        self.on_event = on_event
        self.workspace = workspace
        self.sandbox_root = sandbox_root
        self.sandbox_pid = sandbox_pid
        self.rule = rule
        self.record_decision = record_decision
        self.terminals: dict[str, _Terminal] = {}
        self._titles: dict[str, str] = {}
        self._done: set[str] = set()
        self.replaying = False
        """``session/load`` replays the history as updates: already recorded, not news."""

    # ------------------------------------------------------------------ updates

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if self.replaying:
            return
        kind = getattr(update, "session_update", None)
        if kind == "agent_message_chunk":
            text = getattr(update.content, "text", None)
            if text:
                await self.on_event(hs.Text(text))
        elif kind == "agent_thought_chunk":
            text = getattr(update.content, "text", None)
            if text:
                await self.on_event(hs.Thinking(text))
        elif kind == "tool_call":
            name = str(update.kind or "tool")
            self._titles[update.tool_call_id] = update.title or name
            raw = update.raw_input if isinstance(update.raw_input, dict) else {}
            await self.on_event(
                hs.ToolUse(update.tool_call_id, name, {"title": update.title, **raw})
            )
            if update.status in ("completed", "failed"):
                await self._finish(update)
        elif kind == "tool_call_update" and update.status in ("completed", "failed"):
            await self._finish(update)

    async def _finish(self, update: Any) -> None:
        if update.tool_call_id in self._done:
            return
        self._done.add(update.tool_call_id)
        parts = []
        for c in update.content or []:
            text = getattr(getattr(c, "content", None), "text", None)
            if text:
                parts.append(str(text))
            elif getattr(c, "type", None) == "diff":
                parts.append(f"diff of {c.path}")
        if not parts and update.raw_output is not None:
            parts.append(str(update.raw_output))
        await self.on_event(
            hs.ToolResult(update.tool_call_id, "\n".join(parts), update.status == "failed")
        )

    # ------------------------------------------------------------------ permissions

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any
    ) -> Any:
        title = tool_call.title or self._titles.get(tool_call.tool_call_id, "")
        paths = [loc.path for loc in tool_call.locations or []]
        allowed, by, reason, tool = await settle(
            self.rule,
            self.ask,
            tool_call.tool_call_id,
            tool_call.kind,
            title,
            tool_call.raw_input,
            paths,
            self.workspace,
        )
        self.record_decision(tool_call.tool_call_id, tool, title, allowed, by, reason)
        wanted = ("allow_once", "allow_always") if allowed else ("reject_once", "reject_always")
        for kind in wanted:
            for option in options:
                if option.kind == kind:
                    return RequestPermissionResponse(
                        outcome=AllowedOutcome(option_id=option.option_id, outcome="selected")
                    )
        return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))

    # ------------------------------------------------------------------ files

    def _inside(self, path: str, *, writing: bool) -> Path:
        target = Path(path)
        if not target.is_absolute():
            raise RequestError.invalid_params(
                {"path": path, "reason": "an absolute path is needed"}
            )
        if writing and not (target == self.workspace or self.workspace in target.parents):
            raise RequestError.invalid_params(
                {"path": path, "reason": "coder-es writes only inside the workspace"}
            )
        root = self.sandbox_root()
        if root is None:
            raise RequestError.internal_error({"reason": "the agent's sandbox is gone"})
        return Path(str(root) + str(target))

    async def read_text_file(
        self,
        session_id: str,
        path: str,
        line: int | None = None,
        limit: int | None = None,
        **kwargs: Any,
    ) -> Any:
        where = self._inside(path, writing=False)
        try:
            text = await asyncio.to_thread(where.read_text, encoding="utf-8", errors="replace")
        except OSError as e:
            raise RequestError.invalid_params({"path": path, "reason": e.strerror or str(e)}) from e
        if line is not None or limit is not None:
            lines = text.splitlines(keepends=True)
            start = max((line or 1) - 1, 0)
            text = "".join(lines[start : start + limit if limit else None])
        return ReadTextFileResponse(content=text)

    async def write_text_file(self, session_id: str, path: str, content: str, **kwargs: Any) -> Any:
        where = self._inside(path, writing=True)

        def write() -> None:
            where.parent.mkdir(parents=True, exist_ok=True)
            where.write_text(content, encoding="utf-8")

        try:
            await asyncio.to_thread(write)
        except OSError as e:
            raise RequestError.invalid_params({"path": path, "reason": e.strerror or str(e)}) from e
        return WriteTextFileResponse()

    # ------------------------------------------------------------------ terminals

    async def create_terminal(
        self,
        session_id: str,
        command: str,
        args: list[str] | None = None,
        env: list[Any] | None = None,
        cwd: str | None = None,
        output_byte_limit: int | None = None,
        **kwargs: Any,
    ) -> Any:
        pid = self.sandbox_pid()
        if pid is None:
            raise RequestError.internal_error({"reason": "the agent's sandbox is gone"})
        extra = {e.name: e.value for e in env or []}
        argv = [
            "nsenter",
            "--target",
            str(pid),
            "--user",
            "--mount",
            "--pid",
            "--preserve-credentials",
            f"--wd={cwd or self.workspace}",
            "--",
            "env",
            *(f"{k}={v}" for k, v in extra.items()),
            command,
            *(args or []),
        ]
        if not args:
            argv[-1:] = ["/bin/sh", "-c", command]
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        term = _Terminal(proc, limit=output_byte_limit)

        async def pump() -> None:
            assert proc.stdout is not None
            while chunk := await proc.stdout.read(65536):
                term.output += chunk
                if term.limit and len(term.output) > term.limit:
                    del term.output[: len(term.output) - term.limit]

        term.pump = asyncio.ensure_future(pump())
        terminal_id = f"term-{len(self.terminals) + 1}"
        self.terminals[terminal_id] = term
        return CreateTerminalResponse(terminal_id=terminal_id)

    def _terminal(self, terminal_id: str) -> _Terminal:
        term = self.terminals.get(terminal_id)
        if term is None:
            raise RequestError.invalid_params(
                {"terminalId": terminal_id, "reason": "no such terminal"}
            )
        return term

    async def terminal_output(self, session_id: str, terminal_id: str, **kwargs: Any) -> Any:
        term = self._terminal(terminal_id)
        status = None
        if term.proc.returncode is not None:
            status = TerminalExitStatus(exit_code=term.proc.returncode)
        return TerminalOutputResponse(
            output=term.output.decode("utf-8", "replace"), truncated=False, exit_status=status
        )

    async def wait_for_terminal_exit(self, session_id: str, terminal_id: str, **kwargs: Any) -> Any:
        term = self._terminal(terminal_id)
        code = await term.proc.wait()
        if term.pump is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(term.pump, 5)
        return WaitForTerminalExitResponse(exit_code=code)

    async def kill_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> Any:
        term = self._terminal(terminal_id)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(term.proc.pid, signal.SIGKILL)
        return KillTerminalResponse()

    async def release_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> Any:
        term = self.terminals.pop(terminal_id, None)
        if term is not None and term.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(term.proc.pid, signal.SIGKILL)
        return ReleaseTerminalResponse()

    async def close(self) -> None:
        for terminal_id in list(self.terminals):
            await self.release_terminal("", terminal_id)

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(method)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None

    def on_connect(self, conn: Any) -> None:
        pass


def sandbox_init_pid(outer_pid: int) -> int | None:
    """PID 1 of the sandbox (the child ``unshare --fork`` made), as the host sees it."""
    try:
        with open(f"/proc/{outer_pid}/task/{outer_pid}/children") as f:
            children = f.read().split()
    except OSError:
        return None
    return int(children[0]) if children else None


async def run_acp_turn(
    conn: ClientSideConnection,
    client: HarnessClient,
    *,
    workspace: Path,
    prompt: str,
    resume: str | None,
    on_event: Callable[[hs.HarnessEvent], Any],
) -> None:
    """initialize, new/resume/load the session, prompt; events go to ``on_event``."""
    init = await conn.initialize(
        protocol_version=PROTOCOL_VERSION,
        client_capabilities=ClientCapabilities(
            fs=FileSystemCapabilities(read_text_file=True, write_text_file=True), terminal=True
        ),
        client_info=Implementation(name="coder-es", version="harness"),
    )
    info = init.agent_info
    version = f"{info.name} {info.version}" if info is not None else None
    caps = init.agent_capabilities
    session_id: str
    if resume:
        session_caps = getattr(caps, "session_capabilities", None) if caps else None
        if session_caps is not None and getattr(session_caps, "resume", None) is not None:
            await conn.resume_session(cwd=str(workspace), session_id=resume)
        elif caps is not None and caps.load_session:
            client.replaying = True
            await conn.load_session(cwd=str(workspace), session_id=resume)
        else:
            raise RuntimeError("the agent can neither resume nor load a session")
        session_id = resume
    else:
        session_id = (await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
    client.replaying = False
    await on_event(hs.HarnessStarted(session_id, "", version))
    response = await conn.prompt(
        session_id=session_id, prompt=[TextContentBlock(type="text", text=prompt)]
    )
    usage = getattr(response, "usage", None)
    if usage is not None:
        fields = usage.model_dump() if hasattr(usage, "model_dump") else {}
        await on_event(hs.Usage({k: v for k, v in fields.items() if isinstance(v, int)}))
    stop = str(response.stop_reason)
    ok = stop in ("end_turn", "max_tokens", "max_turn_requests")
    await on_event(hs.Finished(ok, stop, None if ok else f"the agent stopped: {stop}"))


async def converse(
    proc: asyncio.subprocess.Process,
    write_fd: int,
    err_tail: bytearray,
    on_event: Callable[[hs.HarnessEvent], Any],
    *,
    workspace: Path,
    rule: PermissionRule,
    record_decision: Callable[[str, str, str, bool, str, str], None],
    prompt: str,
    resume: str | None,
    ask: Asker | None = None,
) -> None:
    """One prompt over ACP with the agent ``proc`` (stdin: ``write_fd``; stdout: its pipe)."""
    assert proc.stdout is not None
    loop = asyncio.get_running_loop()
    pipe = os.fdopen(write_fd, "wb", buffering=0)
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, pipe)
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    init_pid: int | None = None

    def pid() -> int | None:
        nonlocal init_pid
        if init_pid is None:
            init_pid = sandbox_init_pid(proc.pid)
        return init_pid

    def root() -> Path | None:
        p = pid()
        return None if p is None else Path(f"/proc/{p}/root")

    client = HarnessClient(on_event, workspace, root, pid, rule, record_decision, ask)
    conn = ClientSideConnection(cast(Any, client), writer, proc.stdout)
    try:
        await run_acp_turn(
            conn, client, workspace=workspace, prompt=prompt, resume=resume, on_event=on_event
        )
    except (RequestError, RuntimeError, ConnectionError) as e:
        await asyncio.sleep(0.2)  # its last words, on stderr
        said = err_tail.decode("utf-8", "replace").strip().splitlines()[-1:]
        why = f"the ACP agent failed: {e}" + (f" ({said[0][:300]})" if said else "")
        await on_event(hs.Finished(False, "error", why))
    finally:
        await client.close()
        with contextlib.suppress(Exception):
            await conn.close()
        writer.close()
