"""Claude Code's permission prompts, decided by our rules: an MCP tool coder-es serves.

Claude Code runs with ``--permission-prompt-tool mcp__coder_es__approve`` and an
``--mcp-config`` naming one Streamable HTTP server: a route of the turn's recording proxy
(``/<token>/coder-es/mcp``, so the same token guards it and, without network, the same Unix
socket carries it). When Claude Code would ask the user, it calls the tool with
``{tool_name, input, tool_use_id}``; the answer is our rules' decision (``PermissionRule``:
``--allow``/``--deny``, config rules, the preset, then ``--yes``), recorded as ours are, in the
form Claude Code expects: ``{"behavior": "allow", "updatedInput": ...}`` or
``{"behavior": "deny", "message": ...}``.

The server is the smallest Streamable HTTP one: JSON-RPC over POST answered with
``application/json`` (no SSE stream is needed for a tool that answers at once).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from coder_es.harness.acp_shim import Asker, PermissionRule, settle

SERVER = "coder_es"
TOOL = "approve"
PROMPT_TOOL = f"mcp__{SERVER}__{TOOL}"
ROUTE = "/coder-es/mcp"

# Claude Code's tools as the ACP tool kinds ``PermissionRule`` maps to our tools.
CLAUDE_KINDS = {
    "Bash": "execute",
    "Write": "edit",
    "Edit": "edit",
    "MultiEdit": "edit",
    "NotebookEdit": "edit",
    "Read": "read",
    "Grep": "search",
    "Glob": "search",
}

Record = Callable[[str, str, str, bool, str, str], None]


def mcp_config(proxy_url: str) -> str:
    return json.dumps({"mcpServers": {SERVER: {"type": "http", "url": proxy_url + ROUTE}}})


class ApprovalServer:
    def __init__(
        self, rule: PermissionRule, workspace: Path, record: Record, ask: Asker | None = None
    ) -> None:
        self.rule = rule
        self.workspace = workspace
        self.record = record
        self.ask = ask
        self.seen: Callable[[str, str, dict[str, Any]], None] | None = None
        """Told of each call asked about (Claude Code may ask before its stream shows it)."""

    async def handle(self, body: bytes) -> tuple[int, bytes]:
        try:
            message = json.loads(body)
        except ValueError:
            return 400, b""
        if not isinstance(message, dict) or "id" not in message:
            return 202, b""  # a notification
        result = await self._answer(str(message.get("method")), message.get("params") or {})
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"]}
        if result is None:
            reply["error"] = {"code": -32601, "message": "method not found"}
        else:
            reply["result"] = result
        return 200, json.dumps(reply).encode()

    async def _answer(self, method: str, params: dict[str, Any]) -> dict[str, Any] | None:
        if method == "initialize":
            return {
                "protocolVersion": params.get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "coder-es", "version": "harness"},
            }
        if method == "ping":
            return {}
        if method == "tools/list":
            return {
                "tools": [
                    {
                        "name": TOOL,
                        "description": "coder-es decides a permission request by its rules",
                        "inputSchema": {
                            "type": "object",
                            "properties": {
                                "tool_name": {"type": "string"},
                                "input": {"type": "object"},
                                "tool_use_id": {"type": "string"},
                            },
                            "required": ["tool_name", "input"],
                        },
                    }
                ]
            }
        if method == "tools/call":
            args = params.get("arguments") or {}
            decision = await self.decide(
                str(args.get("tool_name", "")),
                args.get("input") or {},
                str(args.get("tool_use_id", "")),
            )
            return {"content": [{"type": "text", "text": json.dumps(decision)}]}
        return None

    async def decide(self, name: str, tool_input: dict[str, Any], call: str) -> dict[str, Any]:
        if self.seen is not None and call:
            self.seen(call, name, tool_input)
        kind = CLAUDE_KINDS.get(name)
        path = (
            tool_input.get("file_path") or tool_input.get("notebook_path") or tool_input.get("path")
        )
        title = str(tool_input.get("command") or path or name)
        allowed, by, reason, tool = await settle(
            self.rule,
            self.ask,
            call or name,
            kind,
            title,
            tool_input,
            [str(path)] if path else [],
            self.workspace,
        )
        self.record(call or name, tool, title, allowed, by, reason)
        if allowed:
            return {"behavior": "allow", "updatedInput": tool_input}
        return {"behavior": "deny", "message": f"coder-es: {reason}"}


LocalHandler = Callable[[bytes], Awaitable[tuple[int, bytes]]]
