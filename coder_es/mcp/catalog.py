"""What the model is offered from MCP servers, as recorded in ``McpToolsListed`` (no SDK here).

A server's entry: ``{name, transport, status, version, error, tools}`` where ``status`` is
``ready``, ``failed`` (``error`` says why, with the server's stderr tail) or ``disabled``, and
each tool is ``{name, tool, description, input_schema, effect}``: ``name`` is what the model
calls (``mcp__SERVER__TOOL``, mapped when the provider would refuse it), ``tool`` the server's
own name, ``effect`` what its annotations say (``read_only``, ``write``, ``destructive``).

Names: providers accept ``^[A-Za-z0-9_-]{1,64}$``. A name that fits is used as it is; any other
keeps its allowed characters (others become ``_``), is cut to leave room, and ends with ``_`` and
8 hex digits of the sha256 of the full name, so the mapping is deterministic and two server
names never collide. The mapping is the pair (``name``, ``tool``) in the recorded entry.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

MAX_NAME = 64
_OK = re.compile(r"[A-Za-z0-9_-]{1,64}")
_REFUSED = re.compile(r"[^A-Za-z0-9_-]")
PREFIX = "mcp__"

# Top-level schema keywords some providers refuse (OpenAI wants a plain object schema).
_TOP_LEVEL_REFUSED = ("$schema", "$id", "oneOf", "anyOf", "allOf", "not", "enum")


def without_collisions(servers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``servers``' entries where no two offered tools share a name: every tool of a colliding
    set is left out (keeping one would offer a tool the model cannot tell from the other), and
    each server involved says which, naming both, in its ``error``."""
    owners: dict[str, list[tuple[str, str]]] = {}
    for server in servers:
        if server.get("status") != "ready":
            continue
        for tool in server.get("tools") or []:
            owners.setdefault(str(tool["name"]), []).append((str(server["name"]), tool["tool"]))
    clashes = {name: who for name, who in owners.items() if len(who) > 1}
    if not clashes:
        return servers
    out = []
    for server in servers:
        mine = [
            (name, who)
            for name, who in clashes.items()
            if any(s == server.get("name") for s, _ in who)
        ]
        if not mine:
            out.append(server)
            continue
        notes = [
            f"tools {' and '.join(f'{t!r} of server {s!r}' for s, t in who)} map to one name "
            f"{name!r}: neither is offered"
            for name, who in mine
        ]
        error = "; ".join(filter(None, [server.get("error"), *notes]))
        tools = [t for t in server.get("tools") or [] if t["name"] not in clashes]
        out.append({**server, "tools": tools, "error": error})
    return out


def offered_name(server: str, tool: str) -> str:
    """The tool name the model sees for ``tool`` of ``server``."""
    full = f"{PREFIX}{server}__{tool}"
    if _OK.fullmatch(full):
        return full
    digest = hashlib.sha256(full.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    clean = _REFUSED.sub("_", full)
    return f"{clean[: MAX_NAME - 9]}_{digest}"


def effect_of(annotations: dict[str, Any] | None) -> str:
    """``read_only``, ``write`` or ``destructive``, by the MCP spec's defaults: a tool is
    destructive unless it says it only reads (``readOnlyHint``) or that it is not
    (``destructiveHint: false``)."""
    a = annotations or {}
    if a.get("readOnlyHint") is True:
        return "read_only"
    if a.get("destructiveHint") is False:
        return "write"
    return "destructive"


def sanitize_schema(schema: Any) -> dict[str, Any]:
    """An input schema every provider accepts: an object schema with ``properties``."""
    if not isinstance(schema, dict):
        return {"type": "object", "properties": {}}
    out = {k: v for k, v in schema.items() if k not in _TOP_LEVEL_REFUSED}
    out["type"] = "object"
    if not isinstance(out.get("properties"), dict):
        out["properties"] = {}
    required = out.get("required")
    if required is not None and not (
        isinstance(required, list) and all(isinstance(r, str) for r in required)
    ):
        del out["required"]
    return out


def tool_entry(
    server: str,
    name: str,
    description: str | None,
    input_schema: Any,
    annotations: dict[str, Any] | None,
) -> dict[str, Any]:
    return {
        "name": offered_name(server, name),
        "tool": name,
        "description": description or "",
        "input_schema": sanitize_schema(input_schema),
        "effect": effect_of(annotations),
    }


def server_entry(
    describe: dict[str, Any],
    status: str,
    *,
    version: dict[str, Any] | None = None,
    error: str | None = None,
    tools: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return {
        "name": describe["name"],
        "transport": describe.get("transport", ""),
        "status": status,
        "version": version,
        "error": error,
        "tools": list(tools or []),
    }
