"""``read``, ``write`` and ``edit``: the file tools, all through the workspace.

Reads snapshot the file (``FileObserved``) and make it the agent's view; writes and edits are
computed against that view and merged with the disk (``EditApplied``), so a user's concurrent
edit survives. The model gets the workspace's own explanation of what happened (merged, conflict,
refused) so it can act on it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from coder_es.permissions.subject import Subject
from coder_es.tools.base import FileChange, Tool, ToolContext, ToolFailure, ToolResult
from coder_es.tools.lines import line_window
from coder_es.tools.paths import path_subject
from coder_es.tools.schema import doc
from coder_es.workspace.workspace import EditResult

# asyncio is imported where it runs: building the registry (`context`, which only lists the
# tools' definitions) must not load the event loop's modules (start-up time, issue 35).

DEFAULT_LINE_LIMIT = 2000
MAX_LINE_CHARS = 2000
# Bigger files are refused whole: the model should read a range, or search them.
MAX_READ_BYTES = 5 * 1024 * 1024


@dataclass(frozen=True)
class ReadInput:
    path: str = field(metadata=doc("file path, relative to the workspace"))
    offset: int | None = field(
        default=None, metadata=doc("first line to show (1-based; default 1)", minimum=1)
    )
    limit: int | None = field(
        default=None,
        metadata=doc(f"how many lines to show (default {DEFAULT_LINE_LIMIT})", minimum=1),
    )


@dataclass(frozen=True)
class WriteInput:
    path: str = field(metadata=doc("file path, relative to the workspace"))
    content: str = field(metadata=doc("the whole new content of the file"))


@dataclass(frozen=True)
class EditInput:
    path: str = field(metadata=doc("file path, relative to the workspace"))
    old_string: str = field(
        metadata=doc(
            "exact text to replace (must be unique unless replace_all; empty creates a new file)"
        )
    )
    new_string: str = field(metadata=doc("the replacement text"))
    replace_all: bool = field(default=False, metadata=doc("replace every occurrence"))


class ReadTool(Tool[ReadInput]):
    name = "read"
    description = (
        "Read a text file with line numbers. Use offset/limit for large files. "
        "Reading a file is required before editing it."
    )
    input_type = ReadInput
    read_only = True

    def subject(self, args: ReadInput, root: Path) -> Subject:
        return path_subject(args.path, root)

    async def run(self, args: ReadInput, ctx: ToolContext) -> ToolResult:
        # Reading, hashing, storing and numbering a large file is work that releases the event
        # loop (and mostly the GIL): the reads of one response run side by side.
        import asyncio

        return await asyncio.to_thread(self._read, args, ctx)

    def _read(self, args: ReadInput, ctx: ToolContext) -> ToolResult:
        ws = ctx.workspace
        rp = ws.resolve(args.path, outside_ok=ctx.outside_ok)
        try:
            size = os.stat(rp.abs).st_size
        except FileNotFoundError:
            size = None
        except NotADirectoryError as e:
            raise ToolFailure(f"{args.path}: a parent of this path is not a directory") from e
        if rp.abs.is_dir():
            raise ToolFailure(f"{args.path} is a directory; use find to list its files")
        if size is not None and size > MAX_READ_BYTES:
            raise ToolFailure(
                f"{args.path} is {size} bytes, more than the {MAX_READ_BYTES}-byte read limit; "
                "use grep to search it, or bash (head/sed -n) to see a part"
            )
        snap = ws.read(args.path, tool_use_id=ctx.tool_use_id, outside_ok=ctx.outside_ok)
        if not snap.exists:
            raise ToolFailure(f"{args.path} does not exist")
        if snap.text is None:
            return ToolResult(
                f"{snap.path} is a binary (or non-UTF-8) file of {snap.size} bytes; not shown"
            )
        start = (args.offset or 1) - 1
        limit = args.limit or DEFAULT_LINE_LIMIT
        shown, total = line_window(snap.data, snap.text, start, limit)
        if total and start >= total:
            raise ToolFailure(f"offset {start + 1} is past the end of {snap.path} ({total} lines)")
        width = len(str(start + len(shown)))
        out = []
        for i, line in enumerate(shown, start + 1):
            if len(line) > MAX_LINE_CHARS:
                line = line[:MAX_LINE_CHARS] + f"... [line truncated, {len(line)} chars]"
            out.append(f"{i:>{width}}\t{line}")
        if not total:
            out.append("(empty file)")
        rest = total - (start + len(shown))
        if rest > 0:
            out.append(
                f"... ({rest} more lines; read with offset={start + len(shown) + 1} to continue)"
            )
        return ToolResult("\n".join(out))


def _edit_result(result: EditResult) -> ToolResult:
    change = result.as_file_change()
    changes = (FileChange(**change),) if change is not None else ()
    message = result.message_for_agent
    if result.outcome in ("direct", "merged") and result.diff and len(result.diff) < 4000:
        message = f"{message}\n{result.diff}"
    return ToolResult(
        message, is_error=result.outcome in ("conflict", "error"), files_changed=changes
    )


class WriteTool(Tool[WriteInput]):
    name = "write"
    description = (
        "Write a whole file (creating it, or replacing an existing file you have read). "
        "Prefer edit for changes to existing files."
    )
    input_type = WriteInput

    def subject(self, args: WriteInput, root: Path) -> Subject:
        return path_subject(args.path, root)

    async def run(self, args: WriteInput, ctx: ToolContext) -> ToolResult:
        result = ctx.workspace.write(
            args.path, args.content, tool_use_id=ctx.tool_use_id, outside_ok=ctx.outside_ok
        )
        return _edit_result(result)


class EditTool(Tool[EditInput]):
    name = "edit"
    description = (
        "Replace old_string with new_string in a file you have read. old_string must match "
        "exactly once unless replace_all is true. An empty old_string creates a new file."
    )
    input_type = EditInput

    def subject(self, args: EditInput, root: Path) -> Subject:
        return path_subject(args.path, root)

    async def run(self, args: EditInput, ctx: ToolContext) -> ToolResult:
        if args.old_string == args.new_string:
            raise ToolFailure("old_string and new_string are the same: nothing to change")
        result = ctx.workspace.edit(
            args.path,
            args.old_string,
            args.new_string,
            args.replace_all,
            tool_use_id=ctx.tool_use_id,
            outside_ok=ctx.outside_ok,
        )
        return _edit_result(result)
