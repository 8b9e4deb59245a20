"""File tools through the editor's buffers (ACP ``fs/read_text_file`` / ``fs/write_text_file``).

When the client offers both, ``read``, ``write`` and ``edit`` see what the user sees in the editor,
unsaved changes included, and the three-way merge takes the buffer as "theirs": base = what the
agent last read, theirs = the buffer now, ours = the agent's result. A user's unsaved edit is
therefore merged with the agent's instead of being overwritten, and the result goes back through
the client (which updates the buffer, and the disk as it chooses).

Every outcome is recorded exactly as the disk path records it (``FileObserved`` for reads,
``EditApplied`` with base / theirs / proposed / result hashes and their blobs), so replays and
audits cannot tell which side the content came from except by the outcome's own data.

The other tools (bash, grep, find) and a file the client cannot read (not open, outside its
project) go to the wrapped executor, which works on the disk.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from acp import RequestError

from coder_es.errors import CoderESError
from coder_es.store.blobs import BlobStore
from coder_es.tools.base import FileChange, ToolCall, ToolContext, ToolFailure, ToolResult
from coder_es.tools.files import EditInput, ReadTool, WriteInput
from coder_es.tools.registry import ToolExecutor, error_result
from coder_es.tools.schema import parse_input
from coder_es.workspace.atomic import read_current
from coder_es.workspace.contents import merge_contents
from coder_es.workspace.matching import MatchError, replace
from coder_es.workspace.text import adopt_style, decode_text, unified_diff
from coder_es.workspace.workspace import ReadResult

THEIRS_LABEL = "editor"


class BufferAccess(Protocol):
    """The client's view of files. ``read`` returns None when the client has no such file."""

    @property
    def can_read(self) -> bool: ...

    @property
    def can_write(self) -> bool: ...

    async def read(self, path: Path) -> str | None: ...

    async def write(self, path: Path, text: str) -> None: ...

    async def shown(self, ctx: ToolContext) -> None:
        """Returns once the client has been told of the call (its ``tool_call``), so that it
        sees the call before the file requests the call makes."""


class _BufferView:
    """The workspace as ``ReadTool`` uses it, with one file's content taken from the buffer."""

    def __init__(self, workspace: Any, rel: str, data: bytes, blobs: BlobStore) -> None:
        self._ws = workspace
        self._rel = rel
        self._data = data
        self._blobs = blobs

    def resolve(self, path: str, *, outside_ok: bool = False) -> Any:
        return self._ws.resolve(path, outside_ok=outside_ok)

    def read(
        self, path: str, *, tool_use_id: str | None = None, outside_ok: bool = False
    ) -> ReadResult:
        digest = self._blobs.put(self._data, like=self._ws.views.get(self._rel))
        self._ws.sink.observe_file(
            path=self._rel, hash=digest, size=len(self._data), tool_use_id=tool_use_id
        )
        self._ws.note_changes([{"path": self._rel, "after": digest}])
        return ReadResult(
            self._rel, True, digest, len(self._data), self._data, decode_text(self._data)
        )


@dataclass
class _Refusal(Exception):
    message: str
    base: str | None
    disk: bytes | None
    proposed: bytes | None


class ClientFileExecutor:
    """A ``ToolExecutor``: file tools through ``access``, everything else through ``inner``."""

    def __init__(self, inner: ToolExecutor, access: BufferAccess) -> None:
        self.inner = inner
        self.access = access
        self._read_tool = ReadTool()

    async def execute(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        try:
            if call.name in ("read", "write", "edit") and self.access.can_read:
                await self.access.shown(ctx)
            if call.name == "read" and self.access.can_read:
                result = await self._read(call, ctx)
                if result is not None:
                    return result
            elif call.name in ("write", "edit") and self.access.can_read and self.access.can_write:
                return await self._change(call, ctx)
        except asyncio.CancelledError:
            ctx.cancelled.set()
            raise
        except CoderESError as e:
            return error_result(call, e)
        except RequestError as e:
            return ToolResult(
                f"{call.name} failed: the editor answered: {editor_reason(e)}", is_error=True
            )
        return await self.inner.execute(call, ctx)

    async def _buffer(self, path: Path) -> str | None:
        try:
            return await self.access.read(path)
        except RequestError:
            return None  # not a file the editor can give us: the disk decides

    # ------------------------------------------------------------------ read

    async def _read(self, call: ToolCall, ctx: ToolContext) -> ToolResult | None:
        args = self._read_tool.parse(call.input)
        ws = ctx.workspace
        rp = ws.resolve(args.path, outside_ok=ctx.outside_ok)
        if rp.abs.is_dir():
            return None
        text = await self._buffer(rp.abs)
        if text is None:
            return None
        view = _BufferView(ws, rp.rel, text.encode("utf-8"), ws.blobs)
        shadow = ToolContext(
            root=ctx.root,
            tool_use_id=ctx.tool_use_id,
            sink=ctx.sink,
            workspace=view,
            progress=ctx.progress,
            outside_ok=ctx.outside_ok,
            cancelled=ctx.cancelled,
            cache=ctx.cache,
        )
        return await self._read_tool.run(args, shadow)

    # ------------------------------------------------------------------ write / edit

    async def _change(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        ws = ctx.workspace
        blobs: BlobStore = ws.blobs
        edit = call.name == "edit"
        args: Any = parse_input(EditInput if edit else WriteInput, call.input)
        if edit and args.old_string == args.new_string:
            raise ToolFailure("old_string and new_string are the same: nothing to change")
        rp = ws.resolve_for_write(args.path, outside_ok=ctx.outside_ok)
        if rp.abs.is_dir():
            raise ToolFailure(f"{args.path} is a directory, not a file")
        buffered = await self._buffer(rp.abs)
        theirs = buffered.encode("utf-8") if buffered is not None else read_current(rp.abs)
        views = ws.views
        base_hash = views.get(rp.rel)
        try:
            base, proposed = self._proposal(
                args, edit, rp.rel, rp.rel in views, base_hash, theirs, blobs
            )
        except _Refusal as r:
            return self._refuse(ctx, rp.rel, r, blobs)
        merge = merge_contents(
            base, theirs, proposed, ours_label="agent", theirs_label=THEIRS_LABEL
        )
        if merge.kind == "conflict":
            target, outcome = theirs, "conflict"
        else:
            target, outcome = merge.data, ("direct" if theirs == base else "merged")
        if target is not None and target != theirs:
            await self.access.write(rp.abs, target.decode("utf-8"))
        disk_hash = _put(blobs, theirs, base_hash)
        result_hash = _put(blobs, target, disk_hash)
        ctx.sink.apply_edit(
            path=rp.rel,
            base=base_hash,
            disk=disk_hash,
            proposed=_put(blobs, proposed, base_hash),
            result=result_hash,
            outcome=outcome,
            conflicts=len(merge.conflicts) if outcome == "conflict" else 0,
            tool_use_id=ctx.tool_use_id,
        )
        if outcome != "conflict":
            ws.note_changes([{"path": rp.rel, "after": result_hash}])
        changes = (FileChange(rp.rel, disk_hash, result_hash),) if result_hash != disk_hash else ()
        return ToolResult(
            _message(rp.rel, call.name, outcome, theirs, proposed, target, len(merge.conflicts)),
            is_error=outcome == "conflict",
            files_changed=changes,
        )

    @staticmethod
    def _proposal(
        args: Any,
        edit: bool,
        rel: str,
        known: bool,
        base_hash: str | None,
        theirs: bytes | None,
        blobs: BlobStore,
    ) -> tuple[bytes | None, bytes]:
        """(base, proposed): the agent's view and its result; refusals say why not."""
        base = blobs.get(base_hash) if base_hash is not None else None
        if not edit:
            if not known and theirs is not None:
                msg = (
                    f"{rel} already exists and you have not read it: read it first, then write "
                    "(or edit) it, so that nothing in it is overwritten unseen"
                )
                raise _Refusal(msg, None, theirs, args.content.encode("utf-8"))
            content = args.content
            base_text = decode_text(base) if base is not None else None
            if base_text is not None:
                content = adopt_style(content, base_text)
            return base, content.encode("utf-8")
        if base is None:
            if args.old_string == "" and theirs is None:
                return None, args.new_string.encode("utf-8")
            if theirs is None:
                why = f"{rel} does not exist"
            elif known:
                why = f"{rel} did not exist when you last read it; read it again first"
            else:
                why = f"you have not read {rel}: read it first, then edit it"
            raise _Refusal(why, None, theirs, None)
        text = decode_text(base)
        if text is None:
            msg = f"{rel} is binary or not UTF-8 text; use write to replace it whole"
            raise _Refusal(msg, base_hash, theirs, None)
        try:
            new = replace(
                text, args.old_string, args.new_string, replace_all=args.replace_all, path=rel
            )
        except MatchError as e:
            raise _Refusal(str(e), base_hash, theirs, None) from e
        return base, new.encode("utf-8")

    @staticmethod
    def _refuse(ctx: ToolContext, rel: str, r: _Refusal, blobs: BlobStore) -> ToolResult:
        disk_hash = _put(blobs, r.disk, r.base)
        ctx.sink.apply_edit(
            path=rel,
            base=r.base,
            disk=disk_hash,
            proposed=_put(blobs, r.proposed, r.base),
            result=disk_hash,
            outcome="error",
            conflicts=0,
            tool_use_id=ctx.tool_use_id,
        )
        return ToolResult(r.message, is_error=True)


def certain_refusal(tool: str, inp: dict[str, Any], workspace: Any) -> str | None:
    """Why ``edit`` will refuse this call whatever the disk holds by then, or None: asking the
    user to approve an edit that then fails ("you have not read greet.py") wastes their
    attention. Only what the agent's own views decide counts (they change only by its calls),
    never the disk, which may change between the question and the run."""
    if tool != "edit":
        return None
    try:
        args: Any = parse_input(EditInput, inp)
        rel = workspace.resolve(args.path, outside_ok=True).rel
    except (CoderESError, ValueError):
        return None
    views = workspace.views
    if rel not in views:
        if args.old_string == "":
            return None  # creates the file if it is absent then
        return f"you have not read {rel}: read it first, then edit it"
    base_hash = views[rel]
    base = workspace.blobs.get(base_hash) if base_hash is not None else None
    text = decode_text(base) if base is not None else None
    if text is None:
        return None  # the tool says why (absent when read, or binary)
    try:
        replace(text, args.old_string, args.new_string, replace_all=args.replace_all, path=rel)
    except MatchError as e:
        return str(e)
    return None


def editor_reason(e: RequestError) -> str:
    """What the client said when it refused: its message, with the reason its ``data`` carries
    (SDKs answer a thrown error as "Internal error" with the reason in ``data.details``)."""
    data, said = e.data, str(e)
    if isinstance(data, dict):
        data = data.get("details") or data.get("message") or data.get("reason")
    if isinstance(data, str) and data and data not in said:
        return f"{said}: {data}"
    return said


def _put(blobs: BlobStore, data: bytes | None, like: str | None) -> str | None:
    return None if data is None else blobs.put(data, like=like)


def _message(
    rel: str,
    tool: str,
    outcome: str,
    theirs: bytes | None,
    proposed: bytes | None,
    target: bytes | None,
    conflicts: int,
) -> str:
    if outcome == "conflict":
        return (
            f"{rel} has changes in the editor (saved or not) since you last read it, and they "
            f"overlap yours in {conflicts or 1} place(s). Nothing was written: the file is left "
            "as the user has it. Read it again, then redo your change on top of it."
        )
    diff = unified_diff(theirs, target, rel)
    if target == theirs:
        return f"{rel}: no change (it already holds that content)"
    if outcome == "merged":
        kept = unified_diff(proposed, target, rel, max_lines=60)
        return (
            f"{rel} had changes in the editor since you last read it. Your change was merged "
            f"with them and theirs were kept; the file now differs from your version by:\n{kept}"
        )
    verb = "Created" if theirs is None else ("Edited" if tool == "edit" else "Wrote")
    return f"{verb} {rel}\n{diff}" if diff and len(diff) < 4000 else f"{verb} {rel}"
