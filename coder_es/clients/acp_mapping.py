"""Our tool calls and history in ACP's terms: kinds, titles, locations, diffs, statuses.

Pure functions of the call (plus file contents for diffs), shared by live turns and by the
history replay of ``session/load``, so a reloaded session looks the way it did live.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from acp.schema import (
    AgentMessageChunk,
    AgentThoughtChunk,
    ContentToolCallContent,
    FileEditToolCallContent,
    TerminalToolCallContent,
    TextContentBlock,
    ToolCallLocation,
    ToolCallProgress,
    ToolCallStart,
    UserMessageChunk,
)

from coder_es.branching import MoveResult
from coder_es.clients.history import (
    SUMMARY,
    TEXT,
    THINKING,
    TOOL_CALL,
    TOOL_RESULT,
    USER,
    HistoryItem,
)
from coder_es.workspace.text import decode_text

ToolKind = Literal[
    "read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other"
]
Status = Literal["pending", "in_progress", "completed", "failed"]
SessionUpdate = (
    UserMessageChunk | AgentMessageChunk | AgentThoughtChunk | ToolCallStart | ToolCallProgress
)
BlobReader = Callable[[str], bytes]

KINDS: dict[str, ToolKind] = {
    "read": "read",
    "write": "edit",
    "edit": "edit",
    "bash": "execute",
    "grep": "search",
    "find": "search",
}
_PATH_TOOLS = ("read", "write", "edit")


def tool_kind(name: str) -> ToolKind:
    return KINDS.get(name, "other")


def tool_title(name: str, inp: dict[str, Any]) -> str:
    if name == "bash":
        command = str(inp.get("command", ""))
        return f"Run `{command[:120]}`"
    if name in _PATH_TOOLS:
        return f"{name.capitalize()} {inp.get('path', '')}"
    if name in ("grep", "find"):
        where = f" in {inp['path']}" if inp.get("path") else ""
        return f"{name.capitalize()} {inp.get('pattern', '')!s}{where}"
    return name


def locations(name: str, inp: dict[str, Any], root: Path) -> list[ToolCallLocation]:
    """Where the call looks or writes, as absolute paths (what editors open)."""
    raw = inp.get("path")
    if not isinstance(raw, str) or not raw or name not in (*_PATH_TOOLS, "grep", "find"):
        return []
    where = raw if os.path.isabs(raw) else str(root / raw)
    line = inp.get("offset") if name == "read" and isinstance(inp.get("offset"), int) else None
    return [ToolCallLocation(path=where, line=line)]


def text_content(text: str) -> ContentToolCallContent:
    return ContentToolCallContent(type="content", content=TextContentBlock(type="text", text=text))


def code_block(text: str) -> str:
    """``text`` as a Markdown code block: clients render agent messages as Markdown, which
    joins plain lines into one paragraph (``/tree`` became one line). The fence is longer than
    any run of backticks in the text, so the text cannot close it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text}\n{fence}"


def proposed_diff(
    name: str, inp: dict[str, Any], root: Path, current: str | None
) -> FileEditToolCallContent | None:
    """The change a write or edit asks to make, for the permission prompt (before it runs).

    ``current`` is the file as the client or disk holds it now (None: absent or unknown)."""
    path = inp.get("path")
    if name not in ("write", "edit") or not isinstance(path, str):
        return None
    where = path if os.path.isabs(path) else str(root / path)
    if name == "write":
        return FileEditToolCallContent(
            type="diff", path=where, old_text=current, new_text=str(inp.get("content", ""))
        )
    old, new = str(inp.get("old_string", "")), str(inp.get("new_string", ""))
    if current is not None and old and old in current:
        count = -1 if inp.get("replace_all") else 1
        return FileEditToolCallContent(
            type="diff", path=where, old_text=current, new_text=current.replace(old, new, count)
        )
    return FileEditToolCallContent(type="diff", path=where, old_text=old or None, new_text=new)


def result_diffs(
    files_changed: list[dict[str, Any]] | tuple[dict[str, Any], ...],
    root: Path,
    blob: BlobReader,
) -> list[FileEditToolCallContent]:
    """What a finished call changed, file by file, from the recorded content hashes."""
    out: list[FileEditToolCallContent] = []
    for change in files_changed:
        path = str(change.get("path", ""))
        where = path if os.path.isabs(path) else str(root / path)
        before, after = change.get("before"), change.get("after")
        old = decode_text(blob(before)) if before else None
        new = decode_text(blob(after)) if after else ""
        if new is None or (before and old is None):
            continue  # binary: a diff would mean nothing
        out.append(FileEditToolCallContent(type="diff", path=where, old_text=old, new_text=new))
    return out


def start(
    tool_use_id: str, name: str, inp: dict[str, Any], root: Path, status: Status = "pending"
) -> ToolCallStart:
    return ToolCallStart(
        session_update="tool_call",
        tool_call_id=tool_use_id,
        title=tool_title(name, inp),
        kind=tool_kind(name),
        status=status,
        raw_input=inp,
        locations=locations(name, inp, root) or None,
    )


def finish(
    tool_use_id: str,
    output: str,
    is_error: bool,
    files_changed: list[dict[str, Any]] | tuple[dict[str, Any], ...],
    root: Path,
    blob: BlobReader,
    terminal: str | None = None,
    summary: str = "",
) -> ToolCallProgress:
    """A finished call. A command that ran in the editor's ``terminal`` keeps it as the first
    content (it shows the output), followed by the diffs and the ``summary`` of the result
    beyond the output; ``rawOutput`` has the whole result either way."""
    content: list[Any] = list(result_diffs(files_changed, root, blob))
    if content:
        # The diff blocks show the change: the output's own copy of it would be shown again.
        output = without_diff(output)
    if terminal is not None:
        content.insert(0, TerminalToolCallContent(type="terminal", terminal_id=terminal))
        if summary:
            content.append(text_content(summary))
    elif output:
        content.append(text_content(output))
    return ToolCallProgress(
        session_update="tool_call_update",
        tool_call_id=tool_use_id,
        status="failed" if is_error else "completed",
        content=content or None,
        raw_output={"output": output, "is_error": is_error},
    )


def without_diff(output: str) -> str:
    """``output`` up to the unified diff it ends with (``Edited a.py`` and the diff)."""
    lines = output.split("\n")
    for i, line in enumerate(lines[:-1]):
        if line.startswith("--- ") and lines[i + 1].startswith("+++ "):
            return "\n".join(lines[:i]).rstrip("\n")
    return output


def move_call(call_id: str, result: MoveResult, summary: str, root: Path) -> ToolCallStart:
    """A fork, switch or rewind as a finished tool call: the editor lists the files it restored
    (as locations) and the conflicts (files left as the user has them) with the call."""
    target = result.forked_from[1] if result.forked_from is not None else result.node
    return ToolCallStart(
        session_update="tool_call",
        tool_call_id=call_id,
        title=f"{result.reason} to node {target}",
        kind="other",
        status="failed" if result.conflicts else "completed",
        content=[text_content(summary)],
        locations=[ToolCallLocation(path=str(root / f.path)) for f in result.files] or None,
        raw_output=result.to_json(),
    )


def replay(items: list[HistoryItem], root: Path, blob: BlobReader) -> list[SessionUpdate]:
    """The notifications that show a stored conversation (``session/load``)."""
    out: list[SessionUpdate] = []
    # Calls shown but not answered yet: a head rewound to a call, or a turn that ended first.
    # Each is ended when its turn is over, or clients show it running forever (Toad spins).
    open_calls: list[str] = []
    for item in items:
        block = TextContentBlock(type="text", text=item.text)
        if item.kind == USER:
            out.extend(_unanswered(open_calls))
            out.append(UserMessageChunk(session_update="user_message_chunk", content=block))
        elif item.kind in (TEXT, SUMMARY):
            out.append(AgentMessageChunk(session_update="agent_message_chunk", content=block))
        elif item.kind == THINKING:
            out.append(AgentThoughtChunk(session_update="agent_thought_chunk", content=block))
        elif item.kind == TOOL_CALL and item.tool_use_id and item.name:
            out.append(start(item.tool_use_id, item.name, item.input, root))
            open_calls.append(item.tool_use_id)
        elif item.kind == TOOL_RESULT and item.tool_use_id:
            if item.tool_use_id in open_calls:
                open_calls.remove(item.tool_use_id)
            out.append(
                finish(item.tool_use_id, item.text, item.is_error, item.files_changed, root, blob)
            )
    out.extend(_unanswered(open_calls))
    return out


NO_RESULT = "cancelled: no result was recorded (the turn ended, or the head was moved, before it)"


def _unanswered(calls: list[str]) -> list[SessionUpdate]:
    """``calls`` ended as failed (ACP has no cancelled status for a tool call); empties it."""
    ended: list[SessionUpdate] = [
        ToolCallProgress(
            session_update="tool_call_update",
            tool_call_id=call,
            status="failed",
            content=[text_content(NO_RESULT)],
            raw_output={"output": NO_RESULT, "is_error": True},
        )
        for call in calls
    ]
    calls.clear()
    return ended
