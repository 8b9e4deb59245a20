"""One running MCP server, spoken to through the official SDK's ``ClientSession``.

The SDK's transports (``stdio_client``, ``streamablehttp_client``, ``sse_client``) are anyio
context managers that must be entered and left in one task, while calls come from the turns'
tasks. So one owner task per server enters them, initializes the session, lists the tools,
then waits to be told to stop; calls use the session from any task of the same event loop.

Lifetime: ``close`` lets the owner task leave the contexts, which for stdio closes the server's
stdin, waits, then terminates its process group (the SDK's shutdown). If coder-es itself dies
without that, a stdio server started through ``setpriv --pdeathsig KILL`` (Linux, when
``setpriv`` is installed) is killed by the kernel; otherwise it sees its stdin close.

The server's stderr goes to a temporary file whose tail names what went wrong when the server
fails to start or dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from coder_es.config.values import McpServerConfig
from coder_es.errors import CoderESError
from coder_es.mcp.catalog import server_entry, tool_entry
from coder_es.secret_env import scrubbed

STDERR_TAIL = 4000
STDERR_LINES = 10
REQUEST_TIMEOUT = 408  # the code the SDK's McpError carries for a read timeout


class McpServerError(CoderESError):
    """An MCP server could not be started, or failed while it was used."""


def _stdio_command(config: McpServerConfig) -> tuple[str, list[str]]:
    setpriv = shutil.which("setpriv") if sys.platform.startswith("linux") else None
    if setpriv is None:
        return config.command, list(config.args)
    # The kernel kills the server when the thread that started it (ours) dies.
    return setpriv, ["--pdeathsig", "KILL", "--", config.command, *config.args]


class McpConnection:
    def __init__(self, config: McpServerConfig, on_change: Callable[[], None] | None = None):
        self.config = config
        self.on_change = on_change or (lambda: None)
        self.session: Any = None
        self.init: Any = None
        self.tools: list[Any] = []
        self.list_changed = False
        # Lives as long as the connection (closed by close()): the server writes to it.
        self._stderr = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115
        self._stop = asyncio.Event()
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # Read by start(); also consumed here so a late failure is never "never retrieved".
        self._ready.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._task: asyncio.Task[None] | None = None
        self.failure: str | None = None

    # ------------------------------------------------------------------ lifetime

    @property
    def alive(self) -> bool:
        return self._task is not None and not self._task.done() and self.session is not None

    async def start(self) -> None:
        """Start the server, initialize, list its tools; ``McpServerError`` if it cannot."""
        self._task = asyncio.create_task(self._own(), name=f"mcp:{self.config.name}")
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), self.config.startup_timeout_s)
        except TimeoutError:
            self.failure = self._explain(
                f"did not start within {self.config.startup_timeout_s:g} s (startup_timeout_s)"
            )
            await self.close()
            raise McpServerError(self.failure) from None
        except McpServerError:
            await self.close()
            raise

    async def _own(self) -> None:
        from mcp import ClientSession

        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._transport())
                session = await stack.enter_async_context(
                    ClientSession(read, write, message_handler=self._on_message)
                )
                self.init = await session.initialize()
                self.tools = await self._list(session)
                self.session = session
                self._ready.set_result(None)
                await self._stop.wait()
        except BaseException as e:
            why = _describe(e)
            if self.failure is None:
                self.failure = self._explain(f"stopped: {why}" if self._ready.done() else why)
            if not self._ready.done():
                self._ready.set_exception(McpServerError(self.failure))
            if isinstance(e, asyncio.CancelledError):
                raise
        finally:
            self.session = None
            if not self._stop.is_set():
                self.on_change()  # a crash changes what the model is offered

    def _transport(self) -> Any:
        c = self.config
        if c.kind == "stdio":
            from mcp import StdioServerParameters
            from mcp.client.stdio import get_default_environment, stdio_client

            command, args = _stdio_command(c)
            params = StdioServerParameters(
                command=command,
                args=args,
                # The SDK's safe defaults plus the configured variables, never coder-es's own
                # variables or keys (``coder_es.secret_env``).
                env=scrubbed({**get_default_environment(), **c.env}),
                cwd=c.cwd,
            )
            return stdio_client(params, errlog=self._stderr)
        if c.kind == "sse":
            from mcp.client.sse import sse_client

            return sse_client(c.url, headers=dict(c.headers) or None)
        from mcp.client.streamable_http import streamablehttp_client

        return _two(streamablehttp_client(c.url, headers=dict(c.headers) or None))

    async def _list(self, session: Any) -> list[Any]:
        tools: list[Any] = []
        cursor = None
        while True:
            page = await session.list_tools(cursor=cursor) if cursor else await session.list_tools()
            tools += page.tools
            cursor = page.nextCursor
            if not cursor:
                return tools

    async def _on_message(self, message: Any) -> None:
        from mcp import types

        if isinstance(message, types.ServerNotification) and isinstance(
            message.root, types.ToolListChangedNotification
        ):
            self.list_changed = True
            self.on_change()

    async def refresh(self) -> None:
        """List the tools again (after ``notifications/tools/list_changed``)."""
        self.list_changed = False
        if self.session is not None:
            self.tools = await self._list(self.session)

    async def close(self) -> None:
        self._stop.set()
        task = self._task
        if task is not None and not task.done():
            try:
                # The SDK's stdio shutdown waits up to 2 s for the server, then terminates it.
                await asyncio.wait_for(asyncio.shield(task), 5)
            except (TimeoutError, Exception):
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        if not self._ready.done():
            self._ready.cancel()
        self._stderr.close()

    # ------------------------------------------------------------------ reporting

    def stderr_tail(self) -> str:
        if self._stderr.closed:
            return ""
        with contextlib.suppress(OSError, ValueError):
            self._stderr.flush()
            size = self._stderr.seek(0, os.SEEK_END)
            self._stderr.seek(max(0, size - STDERR_TAIL))
            lines = self._stderr.read().strip().splitlines()
            return "\n".join(lines[-STDERR_LINES:])
        return ""

    def _explain(self, what: str) -> str:
        msg = f"MCP server {self.config.name!r} {what}"
        tail = self.stderr_tail()
        return f"{msg}; its stderr ends with:\n{tail}" if tail else msg

    def entry(self) -> dict[str, Any]:
        """This server in an ``McpToolsListed`` event."""
        describe = self.config.describe()
        if not self.alive:
            return server_entry(describe, "failed", error=self.failure or "not running")
        info = self.init.serverInfo
        version = {
            "name": info.name,
            "version": info.version,
            "protocol": str(self.init.protocolVersion),
        }
        tools = [
            tool_entry(
                self.config.name,
                t.name,
                t.description,
                t.inputSchema,
                t.annotations.model_dump(exclude_none=True) if t.annotations else None,
            )
            for t in self.tools
            if self.config.offers(t.name)
        ]
        return server_entry(describe, "ready", version=version, tools=tools)

    # ------------------------------------------------------------------ calls

    async def call(
        self, tool: str, arguments: dict[str, Any], progress: Callable[[str], None]
    ) -> Any:
        """The server's ``CallToolResult``; ``McpServerError`` for a protocol error, a timeout
        or a server that is gone. Cancelling the calling task sends ``notifications/cancelled``."""
        from mcp import types
        from mcp.shared.exceptions import McpError

        session = self.session
        if session is None:
            raise McpServerError(self.failure or f"MCP server {self.config.name!r} is not running")
        # The id the SDK gives this request: it takes it without awaiting first.
        request_id = session._request_id

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            of = f"/{total:g}" if total is not None else ""
            progress(f"{done:g}{of}" + (f" {message}" if message else ""))

        timeout = self.config.tool_timeout_s
        try:
            return await session.call_tool(
                tool,
                arguments,
                read_timeout_seconds=timedelta(seconds=timeout),
                progress_callback=on_progress,
            )
        except asyncio.CancelledError:
            await self._cancel(session, request_id, "cancelled by the user")
            raise
        except McpError as e:
            if e.error.code == types.CONNECTION_CLOSED:
                self._lost()
                raise McpServerError(self.failure or str(e)) from e
            if e.error.code == REQUEST_TIMEOUT:
                await self._cancel(session, request_id, f"timed out after {timeout:g} s")
                msg = f"MCP tool {tool!r} of {self.config.name!r} timed out after {timeout:g} s"
                raise McpServerError(msg) from e
            if not self.alive:
                raise McpServerError(self.failure or str(e)) from e
            raise McpServerError(f"MCP error {e.error.code}: {e.error.message}") from e
        except Exception as e:
            if not self.alive:
                raise McpServerError(self.failure or _describe(e)) from e
            raise McpServerError(f"MCP call failed: {_describe(e)}") from e

    def _lost(self) -> None:
        """The server went away (it exited or crashed): say so with its stderr, and let the
        owner task shut the transport down (a later turn may start the server again)."""
        if self.failure is None:
            self.failure = self._explain("exited or crashed")
        self.session = None
        self._stop.set()

    async def _cancel(self, session: Any, request_id: int, reason: str) -> None:
        from mcp import types

        note = types.CancelledNotification(
            params=types.CancelledNotificationParams(requestId=request_id, reason=reason)
        )
        with contextlib.suppress(Exception):
            await asyncio.wait_for(session.send_notification(types.ClientNotification(note)), 2)


def _describe(e: BaseException) -> str:
    if isinstance(e, BaseExceptionGroup):
        return "; ".join(_describe(x) for x in e.exceptions)
    if isinstance(e, asyncio.CancelledError):
        return "cancelled"
    if getattr(getattr(e, "error", None), "message", None) == "Connection closed":
        return "closed the connection (it exited or crashed)"
    if type(e).__name__ in ("BrokenResourceError", "ClosedResourceError"):
        # anyio's words for "the other end of the pipe is gone": the process ended (or never
        # started) before it answered the MCP handshake.
        return "exited before it answered (it did not start, or crashed at once)"
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


@contextlib.asynccontextmanager
async def _two(cm: Any) -> Any:
    # streamablehttp_client yields (read, write, get_session_id).
    async with cm as (read, write, _session_id):
        yield read, write
