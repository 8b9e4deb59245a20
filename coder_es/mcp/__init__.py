"""MCP tools: servers configured in ``[mcp_servers]`` (or given by an ACP client) offered to the
model as ``mcp__SERVER__TOOL``, through the official ``mcp`` SDK (imported only when a server
starts)."""

from coder_es.mcp.connection import McpServerError
from coder_es.mcp.manager import McpManager
from coder_es.mcp.tool import McpSource, McpTool, with_mcp_tools

__all__ = ["McpManager", "McpServerError", "McpSource", "McpTool", "with_mcp_tools"]
