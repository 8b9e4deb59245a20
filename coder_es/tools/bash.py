"""``bash``: run a shell command in the workspace, in its own process group.

The command runs with ``bash -c`` (``sh -c`` where bash is missing) in a new session, so a timeout
or a cancellation kills the whole process group (the command and everything it started), not just
the shell. stdout and stderr are captured separately, each capped in memory (the middle of a huge
output is dropped, its size noted). Files the command created, modified or deleted are detected
with the workspace's stat index (scanned before and after) and returned as ``files_changed``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coder_es.tools.base import FileChange, Subject, Tool, ToolContext, ToolResult
from coder_es.tools.paths import command_subject
from coder_es.tools.schema import doc

DEFAULT_TIMEOUT_MS = 120_000
MAX_TIMEOUT_MS = 600_000
# Bytes kept in memory per stream; beyond it the head and the tail are kept.
MAX_CAPTURE_BYTES = 2 * 1024 * 1024
KILL_GRACE_S = 1.0
STAT_INDEX_KEY = "bash.stat_index"


@dataclass(frozen=True)
class BashInput:
    command: str = field(metadata=doc("the shell command line to run in the workspace"))
    timeout_ms: int | None = field(
        default=None,
        metadata=doc(
            f"kill it after this many ms (default {DEFAULT_TIMEOUT_MS}, max {MAX_TIMEOUT_MS})",
            minimum=1,
        ),
    )


class _Capture:
    """Keeps the first and last ``MAX_CAPTURE_BYTES / 2`` bytes of a stream."""

    def __init__(self) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        half = MAX_CAPTURE_BYTES // 2
        room = half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > half:
                cut = len(self.tail) - half
                self.dropped += cut
                del self.tail[:cut]

    def text(self) -> str:
        middle = f"\n[... {self.dropped} bytes dropped ...]\n".encode() if self.dropped else b""
        return bytes(self.head + middle + self.tail).decode("utf-8", "replace")


def _shell() -> list[str]:
    bash = shutil.which("bash")
    return [bash, "-c"] if bash else ["/bin/sh", "-c"]


def _kill_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


async def _stop(proc: asyncio.subprocess.Process) -> None:
    """SIGTERM the group, then SIGKILL it if it is still there after a grace period."""
    _kill_group(proc.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), KILL_GRACE_S)
    except TimeoutError:
        pass
    # The shell may be gone while children it started live on in the group.
    _kill_group(proc.pid, signal.SIGKILL)
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(proc.wait(), 5)


class BashTool(Tool[BashInput]):
    name = "bash"
    description = (
        "Run a shell command in the workspace directory (bash -c). Returns stdout, stderr and the "
        "exit code. Long-running commands are killed at the timeout."
    )
    input_type = BashInput

    def subject(self, args: BashInput, root: Path) -> Subject:
        return command_subject(args.command, root)

    def _index(self, ctx: ToolContext) -> Any:
        index = ctx.cache.get(STAT_INDEX_KEY)
        if index is None:
            index = ctx.workspace.stat_index()
            ctx.cache[STAT_INDEX_KEY] = index
        else:
            # Changes since the last command are the user's, not this command's.
            index.rescan()
        return index

    async def run(self, args: BashInput, ctx: ToolContext) -> ToolResult:
        if not args.command.strip():
            return ToolResult("empty command", is_error=True)
        timeout_ms = min(args.timeout_ms or DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS)
        index = await asyncio.to_thread(self._index, ctx) if ctx.workspace is not None else None
        env = {**os.environ, "PAGER": "cat", "GIT_PAGER": "cat", "TERM": "dumb"}
        started = time.monotonic()
        spawning = asyncio.ensure_future(
            asyncio.create_subprocess_exec(
                *_shell(),
                args.command,
                cwd=str(ctx.root),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                env=env,
            )
        )
        try:
            proc = await asyncio.shield(spawning)
        except asyncio.CancelledError:
            # The shell may already run while asyncio is still connecting its pipes: let the
            # spawn finish, then stop the whole process group (its children included).
            ctx.cancelled.set()
            with contextlib.suppress(Exception):
                await _stop(await spawning)
            raise
        out, err = _Capture(), _Capture()

        async def pump(stream: asyncio.StreamReader | None, capture: _Capture, label: str) -> None:
            if stream is None:
                return
            while chunk := await stream.read(65536):
                capture.add(chunk)
                ctx.progress(chunk.decode("utf-8", "replace"))

        pumps = asyncio.gather(pump(proc.stdout, out, "stdout"), pump(proc.stderr, err, "stderr"))
        timed_out = False
        try:
            await asyncio.wait_for(asyncio.shield(pumps), timeout_ms / 1000)
            await proc.wait()
        except TimeoutError:
            timed_out = True
            await _stop(proc)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(pumps, 2)
        except asyncio.CancelledError:
            ctx.cancelled.set()
            await _stop(proc)
            pumps.cancel()
            raise
        finally:
            if proc.returncode is None:
                _kill_group(proc.pid, signal.SIGKILL)
        elapsed_ms = int((time.monotonic() - started) * 1000)
        changes: tuple[FileChange, ...] = ()
        if index is not None:
            found = await asyncio.to_thread(index.rescan)
            changes = tuple(FileChange(c.path, c.before, c.after) for c in found)
            ctx.workspace.note_changes(found)
        parts = []
        stdout, stderr = out.text(), err.text()
        if stdout:
            parts.append(stdout.rstrip("\n"))
        if stderr:
            parts.append("[stderr]\n" + stderr.rstrip("\n"))
        if timed_out:
            parts.append(f"[timed out after {timeout_ms} ms; the process group was killed]")
        else:
            parts.append(f"[exit code {proc.returncode}]")
        if changes:
            listing = ", ".join(f"{c.path} ({_kind(c)})" for c in changes[:20])
            more = f" and {len(changes) - 20} more" if len(changes) > 20 else ""
            parts.append(f"[files changed: {listing}{more}]")
        del elapsed_ms
        return ToolResult(
            "\n".join(parts),
            is_error=timed_out or proc.returncode != 0,
            files_changed=changes,
        )


def _kind(change: FileChange) -> str:
    if change.before is None:
        return "created"
    if change.after is None:
        return "deleted"
    return "modified"
