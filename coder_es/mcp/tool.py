"""MCP tools as the loop's tools, built from the recorded catalog (``McpToolsListed``).

The tools the model is offered come from the session's events, not from the live servers, so a
replay offers exactly what was offered. Running one goes through an ``McpSource``: the session's
``McpManager``, or in a verify replay a source that serves the recording.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

from coder_es.permissions.subject import Subject
from coder_es.tools.base import Tool, ToolContext, ToolResult
from coder_es.tools.registry import ToolRegistry
from coder_es.tools.schema import ToolInputError


class McpSource(Protocol):
    async def catalog(self, *, turn_start: bool = False) -> list[dict[str, Any]] | None:
        """The servers' entries now (None: nothing new to say)."""

    async def call(
        self, server: str, tool: str, arguments: dict[str, Any], ctx: ToolContext
    ) -> ToolResult: ...

    async def aclose(self) -> None: ...


class McpTool(Tool[dict[str, Any]]):
    input_type = dict

    def __init__(self, server: str, entry: dict[str, Any], source: McpSource | None) -> None:
        self.name = str(entry["name"])  # type: ignore[misc]
        self.description = str(entry.get("description") or "")  # type: ignore[misc]
        self.server = server
        self.tool = str(entry["tool"])
        self.effect = str(entry.get("effect") or "destructive")
        self.read_only = self.effect == "read_only"  # type: ignore[misc]
        self.schema = dict(entry.get("input_schema") or {"type": "object", "properties": {}})
        self.source = source

    def definition(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": self.schema}

    def parse(self, raw: Any) -> dict[str, Any]:
        if not isinstance(raw, dict):
            msg = f"arguments must be a JSON object, got {type(raw).__name__}"
            raise ToolInputError(msg)
        return raw

    def subject(self, args: dict[str, Any], root: Path) -> Subject:
        return Subject("mcp", self.name, effect=self.effect)

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        if self.source is None:
            return ToolResult(f"MCP server {self.server!r} is not available", is_error=True)
        return await self.source.call(self.server, self.tool, args, ctx)


def mcp_tools(servers: Iterable[dict[str, Any]], source: McpSource | None) -> list[McpTool]:
    return [
        McpTool(str(s["name"]), t, source)
        for s in servers
        if s.get("status") == "ready"
        for t in s.get("tools") or []
    ]


def with_mcp_tools(
    base: ToolRegistry, servers: Iterable[dict[str, Any]], source: McpSource | None
) -> ToolRegistry:
    """``base``'s own tools plus the MCP tools of ``servers`` (which replace any MCP tools
    ``base`` had; one whose name a built-in tool has is left out)."""
    own: list[Tool[Any]] = [
        t
        for t in (base.get(n) for n in base.names())
        if t is not None and not isinstance(t, McpTool)
    ]
    taken = {t.name for t in own}
    extra: list[Tool[Any]] = []
    for tool in mcp_tools(servers, source):
        if tool.name not in taken:
            taken.add(tool.name)
            extra.append(tool)
    return ToolRegistry([*own, *extra])
