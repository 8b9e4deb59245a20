"""The MCP servers of one session: started lazily, listed, called, shut down with the session.

``McpManager.catalog()`` is what the loop asks before each model call: it starts the servers not
yet running (all at once; the first turn that needs them pays their start-up, later turns
nothing), lists tools again for a server that sent ``tools/list_changed``, tries once per turn
to restart a server that failed or died, and returns the entries of every server. The loop
records them as ``McpToolsListed`` when they differ from the last recorded ones.

A server that fails is an entry with ``status: failed`` and its error (stderr tail included):
the session goes on without its tools.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from coder_es.config.mcp_names import server_name_problem
from coder_es.config.values import McpServerConfig
from coder_es.mcp.catalog import server_entry, without_collisions
from coder_es.mcp.connection import McpConnection, McpServerError
from coder_es.mcp.results import render
from coder_es.tools.base import ToolContext, ToolResult


class McpManager:
    def __init__(self, servers: Iterable[McpServerConfig] = ()) -> None:
        self.servers: dict[str, McpServerConfig] = {}
        self.connections: dict[str, McpConnection] = {}
        self._attempted: set[str] = set()
        self._lock = asyncio.Lock()
        self.add(servers)

    def add(self, servers: Iterable[McpServerConfig]) -> None:
        """More servers (an ACP client's ``mcpServers``); a name already present is replaced
        from the next ``catalog()`` on."""
        for server in servers:
            self.servers[server.name] = server

    async def catalog(self, *, turn_start: bool = False) -> list[dict[str, Any]] | None:
        """Every server's entry. At a turn's start a failed server is tried again (once)."""
        async with self._lock:
            if turn_start:
                self._attempted.clear()
            starting = []
            for name, config in self.servers.items():
                conn = self.connections.get(name)
                if not config.enabled or name in self._attempted or server_name_problem(name):
                    continue
                if conn is None or conn.config != config or not conn.alive:
                    starting.append(self._start(name, config))
            await asyncio.gather(*starting)
            refresh = [c.refresh() for c in self.connections.values() if c.alive and c.list_changed]
            for outcome in await asyncio.gather(*refresh, return_exceptions=True):
                if isinstance(outcome, BaseException) and not isinstance(outcome, Exception):
                    raise outcome
            return without_collisions([self.entry(name) for name in self.servers])

    async def _start(self, name: str, config: McpServerConfig) -> None:
        self._attempted.add(name)
        old = self.connections.pop(name, None)
        if old is not None:
            await old.close()
        conn = McpConnection(config)
        self.connections[name] = conn
        try:
            await conn.start()
        except McpServerError:
            pass  # conn.failure holds the message; the entry reports it

    def entry(self, name: str) -> dict[str, Any]:
        config = self.servers[name]
        if not config.enabled:
            return server_entry(config.describe(), "disabled")
        # The configuration refuses such names; a client's (ACP ``mcpServers``) is refused here.
        problem = server_name_problem(name)
        if problem is not None:
            return server_entry(
                config.describe(), "failed", error=f"server name {name!r} refused: {problem}"
            )
        conn = self.connections.get(name)
        if conn is None:
            return server_entry(config.describe(), "failed", error="not started")
        return conn.entry()

    async def call(
        self, server: str, tool: str, arguments: dict[str, Any], ctx: ToolContext
    ) -> ToolResult:
        conn = self.connections.get(server)
        if conn is None or not conn.alive:
            why = conn.failure if conn is not None and conn.failure else "is not running"
            return ToolResult(f"MCP server {server!r}: {why}", is_error=True)
        try:
            result = await conn.call(tool, arguments, ctx.progress)
        except McpServerError as e:
            return ToolResult(str(e), is_error=True)
        return render(result, getattr(ctx.workspace, "blobs", None))

    async def aclose(self) -> None:
        conns, self.connections = list(self.connections.values()), {}
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)
