"""Claude Code's names for our tools and their fields, both ways.

A hook marked ``dialect = "claude-code"`` (every hook ``coder-es hooks import`` brings in) gets
the tool names and ``tool_input`` fields Claude Code's documentation shows (``Bash`` with
``command``, ``Edit`` with ``file_path``/``old_string``/``new_string``, absolute paths), and an
``updatedInput`` it answers with is read back into ours. Tools Claude Code has no name for
(MCP tools, ``mcp__S__T``, already share its form) keep their names.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

TOOL_NAMES: dict[str, str] = {
    "bash": "Bash",
    "edit": "Edit",
    "write": "Write",
    "read": "Read",
    "grep": "Grep",
    "find": "Glob",
    "task": "Task",
}
_OURS = {v: k for k, v in TOOL_NAMES.items()}

# (our field, Claude Code's field) per tool; a path field becomes an absolute ``file_path``.
_FIELDS: dict[str, tuple[tuple[str, str], ...]] = {
    "bash": (("command", "command"), ("timeout_ms", "timeout")),
    "read": (("path", "file_path"), ("offset", "offset"), ("limit", "limit")),
    "write": (("path", "file_path"), ("content", "content")),
    "edit": (
        ("path", "file_path"),
        ("old_string", "old_string"),
        ("new_string", "new_string"),
        ("replace_all", "replace_all"),
    ),
    "grep": (("pattern", "pattern"), ("path", "path"), ("ignore_case", "-i")),
    "find": (("pattern", "pattern"), ("path", "path")),
    "task": (("description", "description"), ("prompt", "prompt"), ("agent", "subagent_type")),
}
_ABSOLUTE = {("read", "path"), ("write", "path"), ("edit", "path")}


def claude_tool_name(tool: str) -> str:
    return TOOL_NAMES.get(tool, tool)


def our_tool_name(tool: str) -> str:
    return _OURS.get(tool, tool)


def to_claude_input(tool: str, data: dict[str, Any], root: Path) -> dict[str, Any]:
    fields = _FIELDS.get(tool)
    if fields is None:
        return dict(data)
    out: dict[str, Any] = {}
    known = {ours for ours, _ in fields}
    for ours, theirs in fields:
        if ours not in data:
            continue
        value = data[ours]
        if (tool, ours) in _ABSOLUTE and isinstance(value, str):
            value = str(root / value) if not os.path.isabs(value) else value
        out[theirs] = value
    out.update({k: v for k, v in data.items() if k not in known})
    return out


def from_claude_input(tool: str, data: dict[str, Any], root: Path) -> dict[str, Any]:
    """A Claude Code ``updatedInput`` in our fields (a path inside the workspace relative)."""
    fields = _FIELDS.get(tool)
    if fields is None:
        return dict(data)
    out: dict[str, Any] = {}
    known = {theirs for _, theirs in fields}
    for ours, theirs in fields:
        if theirs not in data:
            continue
        value = data[theirs]
        if (tool, ours) in _ABSOLUTE and isinstance(value, str) and os.path.isabs(value):
            try:
                value = str(Path(value).relative_to(root))
            except ValueError:
                pass  # outside the workspace: the permission layer judges it as such
        out[ours] = value
    out.update({k: v for k, v in data.items() if k not in known})
    return out


def tool_response(tool: str, data: dict[str, Any], output: str, is_error: bool) -> dict[str, Any]:
    """What a PostToolUse hook reads as ``tool_response``."""
    response: dict[str, Any] = {"output": output, "success": not is_error}
    path = data.get("file_path")
    if isinstance(path, str):
        response["filePath"] = path
    if tool == "bash":
        response["stdout"] = output
    return response
