"""A command run with input (a hook's JSON on its stdin), as the bash tool runs commands, and a
sandbox prepared ahead for the next one.

``run_with_input`` runs a command exactly as a ``bash`` call does: a transaction in the
session's sandbox (read-only presets read-only, without a transaction), its changes merged by
the same merge, the agent's view of each changed file updated.

**Prepared sandboxes.** Setting a sandbox up (the namespaces, two ``mount -a`` runs, the
overlay, the transaction's directory) costs several times what a hook such as ``exit 0``
costs, and a hook runs on every matching tool call. So once a session has run a hook, the
sandbox of its next hook is set up while the agent does something else: the same ``wrap`` and
the same mounts, the transaction begun, and the command's shell (``LAUNCHER``) waiting on a pipe
for its command line, after which the rest of the pipe is its stdin. Only a session that says it
will release it (``keep_prepared``, undone by ``release``) gets one; a prepared sandbox whose
settings, workspace, directory or variables are not the next hook's is dropped unused.

What stays true: the command runs in the same sandbox (it is the same ``wrap``); what it changes
is captured exactly (the overlay's upper directory receives every write since the mount, and
nothing runs in it before the command: PID 1 only mounts, and the shell only reads the pipe);
the transaction's ``started`` marker is touched again right before the command is sent, so a
file changed while the sandbox waited is planned as a concurrent change (merged, never
overwritten), as in a sandbox set up at that moment. The overlay's lower layer is the live
workspace: nothing looks it up through the overlay before the command runs (the mounts made
over it are on ``.coder-es``, which no change reaches), so the command sees the workspace as it
is when it starts.
"""

from __future__ import annotations

import contextlib
import os
import select
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coder_es.sandbox import SandboxSettings, Transaction, availability
from coder_es.sandbox.namespaces import SETUP_FAILED, Report, SandboxSpec, read_report, wrap
from coder_es.tools.base import ToolContext, ToolResult
from coder_es.tools.bash import (
    _SANDBOX_ENV,
    BashTool,
    CommandRun,
    _collect,
    _Feed,
    _hidden_paths,
    _Ran,
    _shell,
    _spawn,
    _stop,
    sandbox_spec,
)

if TYPE_CHECKING:
    import asyncio

# asyncio is imported where it runs: building the registry (`context`, which only lists the
# tools' definitions) must not load the event loop's modules (start-up time, issue 35).

# ``ToolContext.cache`` keys: whether the session releases what is prepared (``keep_prepared``),
# and what is (its key and the task preparing it).
_KEEP = "with_input.keep_prepared"
_PREPARED = "with_input.prepared"
# Read the command line up to a NUL from the control descriptor, make the rest of it stdin,
# then run the line as ``bash -c`` does (``$0`` is bash's path, as in a bash call).
LAUNCHER = 'IFS= read -r -d "" c <&{fd} || exit {failed}; exec 0<&{fd} {fd}<&-; exec "$0" -c "$c"'
# Clean-up tasks (dropping unused sandboxes, removing used transactions), kept alive here.
_BACKGROUND: set[asyncio.Future[None]] = set()


async def run_with_input(
    command: str,
    data: bytes,
    timeout_ms: int,
    ctx: ToolContext,
    env: dict[str, str] | None = None,
) -> CommandRun:
    """Run ``command`` as the bash tool does (a transaction in the session's sandbox where the
    kernel allows it, read-only presets read-only), with ``data`` on its stdin."""
    import asyncio

    env = dict(env or {})
    settings = ctx.sandbox or SandboxSettings.from_environ()
    tool = BashTool()
    result: ToolResult | None = None
    feed = _Feed(-1, env)
    sandboxed = False
    if ctx.workspace is not None:
        found = await asyncio.to_thread(availability, settings, ctx.workspace.root)
        sandboxed = found.active
    key = _key(ctx, settings, env)
    prepared = await _take(ctx, key) if sandboxed and "\0" not in command else None
    if prepared is not None:
        prepared.input = data
        result = await tool._run_sandboxed(command, timeout_ms, settings, ctx, feed, prepared)
    else:
        fd = os.memfd_create("coder-es-input", 0)
        try:
            os.write(fd, data)
            os.lseek(fd, 0, os.SEEK_SET)
            feed.fd = fd
            if sandboxed:
                result = await tool._run_sandboxed(command, timeout_ms, settings, ctx, feed)
            else:
                result = await tool._run_with_index(command, timeout_ms, ctx, feed)
        finally:
            os.close(fd)
    if sandboxed and ctx.cache.get(_KEEP) and _PREPARED not in ctx.cache:
        ctx.cache[_PREPARED] = (key, asyncio.ensure_future(_prepare(ctx, settings, env)))
    ran = feed.ran
    if ran is None:
        return CommandRun(None, "", "", (), feed.failure or result.output)
    return CommandRun(
        None if ran.timed_out else ran.returncode,
        ran.out.text(),
        ran.err.text(),
        result.files_changed,
        feed.failure,
    )


def keep_prepared(cache: dict[str, Any]) -> None:
    """The session owning ``cache`` releases it (``release``): its hooks may run in sandboxes
    prepared ahead."""
    cache[_KEEP] = True


async def release(cache: dict[str, Any]) -> None:
    """Drop the prepared sandbox (its processes end, its transaction directory goes)."""
    import asyncio

    cache.pop(_KEEP, None)
    entry = cache.pop(_PREPARED, None)
    if entry is not None:
        warm = await _settled(entry[1])
        if warm is not None:
            await warm.discard()
    loop = asyncio.get_running_loop()
    mine = [t for t in _BACKGROUND if t.get_loop() is loop]
    if mine:
        await asyncio.gather(*mine, return_exceptions=True)


def _key(ctx: ToolContext, settings: SandboxSettings, env: dict[str, str]) -> tuple[Any, ...]:
    root = ctx.workspace.root if ctx.workspace is not None else None
    return (root, Path(ctx.root), settings, tuple(sorted(env.items())), tuple(_shell()))


async def _settled(task: asyncio.Future[Warm]) -> Warm | None:
    try:
        return await task
    except Exception:
        return None  # it could not be prepared: the command is set up at its start


async def _take(ctx: ToolContext, key: tuple[Any, ...]) -> Warm | None:
    entry = ctx.cache.pop(_PREPARED, None)
    if entry is None:
        return None
    warm = await _settled(entry[1])
    if warm is None:
        return None
    if entry[0] != key or warm.proc.returncode is not None:
        _background(warm.discard())
        return None
    return warm


def _background(work: Coroutine[Any, Any, None]) -> None:
    """Clean-up off the command's path, awaited by ``release`` at the latest."""
    import asyncio

    task = asyncio.ensure_future(work)
    _BACKGROUND.add(task)
    task.add_done_callback(_BACKGROUND.discard)


async def _prepare(ctx: ToolContext, settings: SandboxSettings, env: dict[str, str]) -> Warm:
    import asyncio

    root: Path = ctx.workspace.root
    hidden = _hidden_paths(root, settings)
    tx = None if settings.read_only else await asyncio.to_thread(Transaction.begin, root)
    control_r, control_w = os.pipe()
    report_r, report_w = os.pipe()
    try:
        spec = sandbox_spec(root, Path(ctx.root), settings, tx, hidden)
        shell = _shell()
        launcher = LAUNCHER.format(fd=control_r, failed=SETUP_FAILED)
        argv = wrap(spec, [shell[0], "-c", launcher, shell[0]])
        proc = await _spawn(
            argv, root, stdin=report_w, extra_env={**_SANDBOX_ENV, **env}, pass_fds=(control_r,)
        )
    except BaseException:
        for fd in (control_w, report_r):
            os.close(fd)
        if tx is not None:
            await asyncio.to_thread(tx.close)
        raise
    finally:
        os.close(control_r)
        os.close(report_w)
    return Warm(tx, spec, proc, control_w, report_r)


def _write_all(fd: int, data: bytes) -> None:
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError:
        pass  # the command ended without reading all of its input
    finally:
        os.close(fd)


@dataclass
class Warm:
    """A prepared sandbox (``bash.Prepared``): its shell waits for one command on ``control``."""

    tx: Transaction | None
    spec: SandboxSpec
    proc: asyncio.subprocess.Process
    control: int
    report: int
    input: bytes = b""

    async def run(self, command: str, timeout_ms: int, ctx: ToolContext) -> tuple[_Ran, Report]:
        import asyncio

        if self.tx is not None:
            await asyncio.to_thread(self._restart_clock)
        data = command.encode("utf-8", "surrogateescape") + b"\0" + self.input
        control, self.control = self.control, -1
        if len(data) <= select.PIPE_BUF:
            # Fits the empty pipe at once: no thread (each hop is a wake-up on a busy machine).
            _write_all(control, data)
            writing: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            writing.set_result(None)
        else:
            writing = asyncio.ensure_future(asyncio.to_thread(_write_all, control, data))
        try:
            ran = await _collect(self.proc, timeout_ms, ctx)
        except BaseException:
            os.close(self.report)  # the command was stopped: its report is not read
            self.report = -1
            raise
        finally:
            with contextlib.suppress(Exception):
                await writing
        report, self.report = self.report, -1
        # The namespace is gone (its first process waits for PID 1): the report is whole.
        return ran, read_report(report)

    def finish(self) -> None:
        import asyncio

        if self.tx is not None:
            _background(asyncio.to_thread(self.tx.close))

    def _restart_clock(self) -> None:
        # The command starts now: what changed while the sandbox waited is a concurrent change.
        assert self.tx is not None
        marker = self.tx.path / "started"
        os.utime(marker)
        self.tx.started_ns = os.lstat(marker).st_ctime_ns

    async def discard(self) -> None:
        import asyncio

        if self.control >= 0:
            os.close(self.control)  # the shell reads an end of file and exits
            self.control = -1
        try:
            await asyncio.wait_for(self.proc.communicate(), 5)
        except (TimeoutError, Exception):
            await _stop(self.proc)
        if self.report >= 0:
            os.close(self.report)
            self.report = -1
        if self.tx is not None:
            await asyncio.to_thread(self.tx.close)
