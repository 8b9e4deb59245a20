"""Shell commands in the editor's terminal (ACP ``terminal/*``), when the client offers them.

``bash`` gives ``AcpTerminal`` the command line it would run itself (``coder_es.tools.terminal``:
the sandbox wrapper with the transaction's overlay, or the plain shell in the fallback); this
module only speaks the protocol:

1. once the client has been told about the tool call (``tool_call``), ``terminal/create`` with
   the command line, the workspace as ``cwd``, the variables ``bash`` sets, and ``bash``'s output
   limit as ``outputByteLimit``;
2. a ``tool_call_update`` whose content is the terminal (``{"type": "terminal"}``): the editor
   shows the command's output live, and keeps showing it after the release;
3. ``terminal/wait_for_exit`` up to the call's timeout, ``terminal/kill`` past it;
4. ``terminal/output`` (the output, truncated or not, and the exit status);
5. ``terminal/release``, always; a cancelled call is killed and released first.

The changes the command made are then found and applied by ``bash`` as for a local command, and
the recorded result has the same shape (output, exit code, ``files_changed``): a replay needs no
client. A subagent's calls (a child session the client is not shown) run here, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from acp import Client, RequestError
from acp.schema import EnvVariable, TerminalToolCallContent, ToolCallProgress

from coder_es.clients.acp_files import editor_reason
from coder_es.tools.base import ToolCall, ToolContext, ToolFailure, ToolResult
from coder_es.tools.registry import ToolExecutor
from coder_es.tools.terminal import Terminal, TerminalRun

# How long a killed command may take to be reported as ended before the output is read anyway.
KILL_GRACE_S = 10.0
SHOWN_WAIT_S = 30.0


class TerminalAccess(Protocol):
    def terminal_for(self, ctx: ToolContext) -> Terminal | None:
        """The terminal a call's shell command runs in, or None (it runs here)."""


class ClientTerminalExecutor:
    """A ``ToolExecutor``: ``bash`` calls get the client's terminal (when it offers one)."""

    def __init__(self, inner: ToolExecutor, access: TerminalAccess) -> None:
        self.inner = inner
        self.access = access

    async def execute(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        if call.name == "bash" and ctx.terminal is None:
            ctx.terminal = self.access.terminal_for(ctx)
        return await self.inner.execute(call, ctx)


@dataclass
class AcpTerminal:
    """``coder_es.tools.terminal.Terminal`` over one connection, for one tool call."""

    client: Client
    session_id: str
    tool_use_id: str
    shown: Callable[[], Awaitable[Any]]
    """Waits until the client has been sent the tool call (the terminal is embedded in it)."""

    async def run(
        self,
        command: str,
        args: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        timeout_ms: int,
        output_limit: int,
    ) -> TerminalRun:
        # Normally at once (the loop emits ToolStarted before it runs the call); bounded, so a
        # call the client was somehow not shown still runs.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.shown(), SHOWN_WAIT_S)
        try:
            created = await self.client.create_terminal(
                session_id=self.session_id,
                command=command,
                args=list(args),
                env=[EnvVariable(name=k, value=v) for k, v in env.items()],
                cwd=str(cwd),
                output_byte_limit=output_limit,
            )
        except RequestError as e:
            raise ToolFailure(f"the editor could not start a terminal: {editor_reason(e)}") from e
        tid = created.terminal_id
        try:
            result = await self._follow(tid, timeout_ms)
        except asyncio.CancelledError:
            await asyncio.shield(self._stop(tid))
            raise
        except RequestError as e:
            await asyncio.shield(self._stop(tid))
            raise ToolFailure(f"the editor's terminal failed: {editor_reason(e)}") from e
        await self._release(tid)
        return result

    async def _follow(self, tid: str, timeout_ms: int) -> TerminalRun:
        sid = self.session_id
        await self.client.session_update(
            session_id=sid,
            update=ToolCallProgress(
                session_update="tool_call_update",
                tool_call_id=self.tool_use_id,
                content=[TerminalToolCallContent(type="terminal", terminal_id=tid)],
            ),
        )
        timed_out = False
        try:
            await asyncio.wait_for(
                self.client.wait_for_terminal_exit(session_id=sid, terminal_id=tid),
                timeout_ms / 1000,
            )
        except TimeoutError:
            timed_out = True
            await self.client.kill_terminal(session_id=sid, terminal_id=tid)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self.client.wait_for_terminal_exit(session_id=sid, terminal_id=tid),
                    KILL_GRACE_S,
                )
        got = await self.client.terminal_output(session_id=sid, terminal_id=tid)
        status = got.exit_status
        return TerminalRun(
            terminal_id=tid,
            output=got.output,
            truncated=got.truncated,
            exit_code=status.exit_code if status is not None else None,
            signal=status.signal if status is not None else None,
            timed_out=timed_out,
        )

    async def _stop(self, tid: str) -> None:
        with contextlib.suppress(Exception):
            await self.client.kill_terminal(session_id=self.session_id, terminal_id=tid)
        await self._release(tid)

    async def _release(self, tid: str) -> None:
        with contextlib.suppress(Exception):
            await self.client.release_terminal(session_id=self.session_id, terminal_id=tid)
