"""Which names an MCP server may have: the configuration checks them as it loads, the MCP
manager before it connects (here, in the configuration, the lower of the two)."""

from __future__ import annotations

import re


def server_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a server's name, or None. ``mcp__SERVER__TOOL`` must split one
    way: with ``docs_`` allowed, ``mcp__docs___wipe`` is both ``docs_``/``wipe`` and
    ``docs``/``_wipe``, and a rule ``mcp__docs__*`` would match the other server's tools."""
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,40}", name):
        return "letters, digits, _ and -, at most 40 characters"
    if "__" in name:
        return "no '__' (it separates the server from the tool in mcp__SERVER__TOOL)"
    if name.startswith("_") or name.endswith("_"):
        return "no '_' at its start or end (mcp__SERVER__TOOL would split two ways)"
    return None
