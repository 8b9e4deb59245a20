"""``bash``: run a shell command in the workspace, as a transaction where the kernel allows it.

The command runs with ``bash -c`` (``sh -c`` where bash is missing). stdout and stderr are
captured separately, each capped in memory (the middle of a huge output is dropped, its size
noted).

Where user, mount and PID namespaces with overlayfs work (``coder_es.sandbox``), the command runs
in its own namespaces with the workspace as an overlay: its exact changes are merged into the
workspace when it ends (a user's concurrent edit is merged, never reverted), processes it leaves
behind are killed and reported, the store and the user's coder-es directories are out of its
reach, and a read-only agent runs it on a read-only file system.

Elsewhere (the fallback) it runs in a new session so that a timeout or a cancellation kills its
process group, and the files it changed are found with the workspace's stat index, scanned before
and after: a change anyone else makes while the command runs is attributed to the command.

With ``ToolContext.terminal`` (an editor's terminal, ``coder_es.tools.terminal``) the same command
line, sandbox wrapper included, runs there instead of as a child of this process: the user
watches it, and its changes are found, merged and reported exactly as above. The terminal gives
one stream (stdout and stderr interleaved as the user saw them) and keeps its tail when the
output is larger than ``MAX_CAPTURE_BYTES``.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from coder_es.permissions.subject import Subject
from coder_es.sandbox import SandboxSettings, Transaction, availability
from coder_es.sandbox.namespaces import Report, ReportFifo, SandboxSpec, read_report, wrap
from coder_es.sandbox.transaction import STORE_DIRNAME, CommitError, Outcome
from coder_es.secret_env import command_environ, dropped_names
from coder_es.tools.base import FileChange, Tool, ToolContext, ToolResult
from coder_es.tools.paths import command_subject
from coder_es.tools.schema import doc
from coder_es.tools.terminal import Terminal, terminal_command
from coder_es.userdirs import protected_user_dirs

if TYPE_CHECKING:
    import asyncio

# asyncio is imported where it runs: building the registry (`context`, which only lists the
# tools' definitions) must not load the event loop's modules (start-up time, issue 35).

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
    import asyncio

    _kill_group(proc.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), KILL_GRACE_S)
    except TimeoutError:
        pass
    # The shell may be gone while children it started live on in the group.
    _kill_group(proc.pid, signal.SIGKILL)
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(proc.wait(), 5)


@dataclass
class _Ran:
    out: _Capture
    err: _Capture
    returncode: int | None
    timed_out: bool
    truncated: bool = False
    """The terminal kept only the end of the output."""
    signal: str | None = None
    terminal: str | None = None
    """The id of the editor's terminal that ran it."""


# Mount plans of read-only commands, by content (``namespaces.SandboxSpec.shared_plans``).
PLANS_DIRNAME = "sandbox-plans"

# What a command sees besides its environment: no pager waits for a key, no colour codes.
_QUIET_ENV = {"PAGER": "cat", "GIT_PAGER": "cat", "TERM": "dumb"}


async def _run_process(
    argv: list[str],
    cwd: Path,
    timeout_ms: int,
    ctx: ToolContext,
    stdin: int | None = None,
    extra_env: dict[str, str] | None = None,
    pass_fds: tuple[int, ...] = (),
) -> _Ran:
    """Run ``argv`` in a new session, capturing its output; kill its group at the timeout."""
    import asyncio

    spawning = asyncio.ensure_future(_spawn(argv, cwd, stdin, extra_env, pass_fds))
    try:
        proc = await asyncio.shield(spawning)
    except asyncio.CancelledError:
        # The shell may already run while asyncio is still connecting its pipes: let the
        # spawn finish, then stop the whole process group (its children included).
        ctx.cancelled.set()
        with contextlib.suppress(Exception):
            await _stop(await spawning)
        raise
    return await _collect(proc, timeout_ms, ctx)


async def _spawn(
    argv: list[str],
    cwd: Path,
    stdin: int | None = None,
    extra_env: dict[str, str] | None = None,
    pass_fds: tuple[int, ...] = (),
) -> asyncio.subprocess.Process:
    import asyncio

    # Never coder-es's own variables or keys (``coder_es.secret_env``).
    env = {**command_environ(), **_QUIET_ENV, **(extra_env or {})}
    return await asyncio.create_subprocess_exec(
        *argv,
        cwd=str(cwd),
        stdin=asyncio.subprocess.DEVNULL if stdin is None else stdin,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
        env=env,
        pass_fds=pass_fds,
    )


async def _collect(proc: asyncio.subprocess.Process, timeout_ms: int, ctx: ToolContext) -> _Ran:
    """The output of a started process; its group killed at the timeout or a cancellation."""
    import asyncio

    out, err = _Capture(), _Capture()

    async def pump(stream: asyncio.StreamReader | None, capture: _Capture) -> None:
        if stream is None:
            return
        while chunk := await stream.read(65536):
            capture.add(chunk)
            ctx.progress(chunk.decode("utf-8", "replace"))

    pumps = asyncio.gather(pump(proc.stdout, out), pump(proc.stderr, err))
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
    return _Ran(out, err, proc.returncode, timed_out)


# Run by the editor's terminal before the command: its environment is the client's, where
# coder-es's variables may be too (the client started coder-es with them).
_SCRUB_SH = (
    "for n in $(awk 'BEGIN { for (k in ENVIRON) if (k ~ /^CODER_ES_/) print k }'); "
    'do unset "$n"; done; exec "$@"'
)


def scrub_argv(argv: list[str]) -> list[str]:
    """``argv`` run without coder-es's variables, and without any variable of ours holding a
    coder-es key under another name (``coder_es.secret_env``)."""
    unset = [arg for name in dropped_names() for arg in ("-u", name)]
    return ["env", *unset, "/bin/sh", "-c", _SCRUB_SH, "coder-es-env", *argv]


async def _run_in_terminal(
    terminal: Terminal,
    argv: list[str],
    report: Path | None,
    cwd: Path,
    timeout_ms: int,
    ctx: ToolContext,
    extra_env: dict[str, str] | None = None,
) -> _Ran:
    """Run ``argv`` in the editor's terminal. The terminal's environment is the client's (which
    started this process); only what ``_run_process`` sets on top of it is passed."""
    import asyncio

    script_dir = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="coder-es-terminal-"))
    command, args = terminal_command(scrub_argv(argv), report, script_dir)
    try:
        got = await terminal.run(
            command,
            args,
            cwd=cwd,
            env={**_QUIET_ENV, **(extra_env or {})},
            timeout_ms=timeout_ms,
            output_limit=MAX_CAPTURE_BYTES,
        )
    except asyncio.CancelledError:
        ctx.cancelled.set()
        raise
    finally:
        shutil.rmtree(script_dir, ignore_errors=True)
    out = _Capture()
    # A terminal is usually a pty, whose line discipline turns "\n" into "\r\n".
    out.add(got.output.replace("\r\n", "\n").encode("utf-8", "surrogateescape"))
    return _Ran(
        out,
        _Capture(),
        got.exit_code,
        got.timed_out,
        truncated=got.truncated,
        signal=got.signal,
        terminal=got.terminal_id,
    )


# The workspace is an overlay mount in the sandbox: git would stop looking for a repository
# at that mount's boundary, so a workspace inside a repository (a monorepo's subdirectory)
# would seem to be in none.
_SANDBOX_ENV = {"GIT_DISCOVERY_ACROSS_FILESYSTEM": "1"}


class BashTool(Tool[BashInput]):
    name = "bash"
    description = (
        "Run a shell command in the workspace directory (bash -c). Returns stdout, stderr and the "
        "exit code. Long-running commands are killed at the timeout. For commands that finish "
        "(builds, tests, git, scripts), not for servers or daemons: processes still running when "
        "the command's shell exits are killed and reported as an error."
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
        import asyncio

        if not args.command.strip():
            return ToolResult("empty command", is_error=True)
        timeout_ms = min(args.timeout_ms or DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS)
        settings = ctx.sandbox or SandboxSettings.from_environ()
        if ctx.workspace is not None:
            found = await asyncio.to_thread(availability, settings, ctx.workspace.root)
            if found.active:
                return await self._run_sandboxed(args.command, timeout_ms, settings, ctx)
        return await self._run_with_index(args.command, timeout_ms, ctx)

    # ------------------------------------------------------------------ the sandbox

    async def _run_sandboxed(
        self,
        command: str,
        timeout_ms: int,
        settings: SandboxSettings,
        ctx: ToolContext,
        feed: _Feed | None = None,
        prepared: Prepared | None = None,
    ) -> ToolResult:
        import asyncio

        workspace = ctx.workspace
        root: Path = workspace.root
        read_only = settings.read_only
        if prepared is not None:
            tx, hidden = prepared.tx, prepared.spec.hidden
        else:
            hidden = _hidden_paths(root, settings)
            # A read-only command changes nothing to capture: no transaction directory (its
            # creation and removal cost more than the command on a busy disk); its mount plans
            # are kept by content in the store's directory (``PLANS_DIRNAME``).
            tx = None if read_only else await asyncio.to_thread(Transaction.begin, root)
        committing: asyncio.Future[Outcome] | None = None
        try:
            if prepared is not None:
                ran, report = await prepared.run(command, timeout_ms, ctx)
            else:
                spec = sandbox_spec(root, Path(ctx.root), settings, tx, hidden)
                ran, report = await self._launch(spec, command, tx, timeout_ms, ctx, feed)
            if feed is not None:
                feed.ran = ran
            if not report.ready:
                why = report.setup_failure or ran.err.text().strip() or "unknown reason"
                if ran.terminal is not None and not report.setup_failure:
                    why = (
                        f"the editor's terminal ended it before it started (exit "
                        f"{ran.returncode}): {ran.out.text().strip()[-500:] or 'no output'}"
                    )
                failure = f"the command did not run: its sandbox could not be set up ({why})"
                if feed is not None:
                    feed.failure = failure
                return ToolResult(failure, is_error=True, metadata=_terminal_meta(ran, failure))
            outcome = Outcome()
            if tx is not None:
                committing = asyncio.ensure_future(
                    asyncio.to_thread(self._commit, tx, workspace, hidden)
                )
                try:
                    outcome = await asyncio.shield(committing)
                except (CommitError, OSError) as e:
                    # Planning stores blobs and the journal before anything is applied.
                    failed = e if isinstance(e, CommitError) else CommitError(str(e))
                    if feed is not None:
                        feed.failure = str(failed)
                    parts = [*_output(ran, timeout_ms), f"[error: {failed}]"]
                    return ToolResult(
                        "\n".join(parts),
                        is_error=True,
                        metadata=_terminal_meta(ran, parts[-2] + "\n" + parts[-1]),
                    )
        finally:
            if committing is not None and not committing.done():
                # Cancelled while applying: the apply finishes (it is all or nothing) before the
                # transaction is closed; the call is then recorded as interrupted.
                with contextlib.suppress(Exception):
                    await committing
            if prepared is not None:
                prepared.finish()  # its directory is removed off the command's path
            elif tx is not None:
                await asyncio.to_thread(tx.close)
        changes = tuple(
            FileChange(a.path, a.before, a.after, a.outcome, a.proposed, a.own)
            for a in sorted(outcome.applied, key=lambda a: a.path)
            if a.recorded
        )
        workspace.note_changes(c for c in changes if c.outcome != "conflict")
        parts = _output(ran, timeout_ms)
        status = len(parts) - 1
        if changes:
            parts.append(_listing(changes))
        conflicts = [a for a in outcome.applied if a.outcome == "conflict"]
        for a in conflicts:
            parts.append(
                f"[conflict: {a.path} was changed by someone else while the command ran, in a way "
                "that cannot be merged with the command's change: their version stays on disk; "
                f"the command's version is kept in the store as blob {a.proposed}. Read the file "
                "and redo the change on top of it.]"
            )
        parts.extend(f"[note: {n}]" for n in outcome.notes)
        if report.leftovers:
            shown = "; ".join(report.leftovers[:10])
            more = f" and {len(report.leftovers) - 10} more" if len(report.leftovers) > 10 else ""
            parts.append(
                f"[error: the command left processes running ({shown}{more}); they were killed. "
                "bash is for commands that finish; a server or daemon cannot be kept running]"
            )
        if read_only:
            parts.append("[read-only: this agent's commands run on a read-only file system]")
        return ToolResult(
            "\n".join(parts),
            is_error=ran.timed_out or ran.returncode != 0 or bool(report.leftovers),
            files_changed=changes,
            metadata=_terminal_meta(ran, "\n".join(parts[status:])),
        )

    @staticmethod
    async def _launch(
        spec: SandboxSpec,
        command: str,
        tx: Transaction | None,
        timeout_ms: int,
        ctx: ToolContext,
        feed: _Feed | None = None,
    ) -> tuple[_Ran, Report]:
        """Run the command in its sandbox, here or in the editor's terminal; PID 1's report."""
        import asyncio

        argv = wrap(spec, [*_shell(), command if feed is None else feed.command(command)])
        if ctx.terminal is not None:
            where = tx.path if tx is not None else spec.fstab
            name = "report" if tx is not None else f"report-{secrets.token_hex(8)}"
            fifo = await asyncio.to_thread(ReportFifo.create, where / name)
            reading = asyncio.ensure_future(asyncio.to_thread(fifo.read))
            try:
                ran = await _run_in_terminal(
                    ctx.terminal, argv, fifo.path, spec.workspace, timeout_ms, ctx, _SANDBOX_ENV
                )
            finally:
                fifo.finished()
            try:
                return ran, await reading
            finally:
                if tx is None:
                    with contextlib.suppress(OSError):
                        os.unlink(fifo.path)
        read_end, write_end = os.pipe()
        reading = asyncio.ensure_future(asyncio.to_thread(read_report, read_end))
        try:
            # PID 1 reads nothing: its stdin is the report pipe's write end.
            ran = await _run_process(
                argv,
                spec.workspace,
                timeout_ms,
                ctx,
                stdin=write_end,
                extra_env=_SANDBOX_ENV if feed is None else {**_SANDBOX_ENV, **feed.env},
                pass_fds=() if feed is None else (feed.fd,),
            )
        finally:
            os.close(write_end)
        return ran, await reading

    @staticmethod
    def _commit(tx: Transaction, workspace: Any, hidden: tuple[Path, ...]) -> Outcome:
        plan = tx.plan(workspace.root, workspace.views, workspace.blobs, protected=hidden)
        return tx.commit(plan, workspace.root, workspace.blobs)

    # ------------------------------------------------------------------ the fallback

    async def _run_with_index(
        self, command: str, timeout_ms: int, ctx: ToolContext, feed: _Feed | None = None
    ) -> ToolResult:
        import asyncio

        index = await asyncio.to_thread(self._index, ctx) if ctx.workspace is not None else None
        argv = [*_shell(), command]
        if feed is not None:
            ran = await _run_process(
                argv, Path(ctx.root), timeout_ms, ctx, stdin=feed.fd, extra_env=feed.env
            )
            feed.ran = ran
        elif ctx.terminal is not None:
            ran = await _run_in_terminal(ctx.terminal, argv, None, Path(ctx.root), timeout_ms, ctx)
        else:
            ran = await _run_process(argv, Path(ctx.root), timeout_ms, ctx)
        changes: tuple[FileChange, ...] = ()
        if index is not None:
            found = await asyncio.to_thread(index.rescan)
            changes = tuple(FileChange(c.path, c.before, c.after) for c in found)
            ctx.workspace.note_changes(found)
        parts = _output(ran, timeout_ms)
        status = len(parts) - 1
        if changes:
            parts.append(_listing(changes))
        return ToolResult(
            "\n".join(parts),
            is_error=ran.timed_out or ran.returncode != 0,
            files_changed=changes,
            metadata=_terminal_meta(ran, "\n".join(parts[status:])),
        )


@dataclass
class _Feed:
    """A command run with ``data`` on its stdin (a hook's JSON input) and extra variables;
    what it did is kept here besides the tool result."""

    fd: int
    env: dict[str, str]
    ran: _Ran | None = None
    failure: str = ""

    def command(self, command: str) -> str:
        # Inside the sandbox the command's stdin is /dev/null (PID 1 reads the report pipe):
        # the input arrives as an inherited descriptor made its stdin before the command runs.
        return f"exec 0<&{self.fd} {self.fd}<&-\n{command}"


@dataclass(frozen=True)
class CommandRun:
    """A command run with input (``run_with_input``): its exit code (None: killed at its
    timeout or never started), output, and the files it changed (merged like a bash call's)."""

    returncode: int | None
    stdout: str
    stderr: str
    files_changed: tuple[FileChange, ...]
    failure: str = ""


def sandbox_spec(
    root: Path,
    cwd: Path,
    settings: SandboxSettings,
    tx: Transaction | None,
    hidden: tuple[Path, ...],
) -> SandboxSpec:
    """Where a command runs: the transaction's overlay, or read-only without one."""
    return SandboxSpec(
        workspace=root,
        cwd=cwd,
        upper=None if tx is None else tx.upper,
        work=None if tx is None else tx.work,
        fstab=_plans_dir(root) if tx is None else tx.path / "mounts.fstab",
        hidden=hidden,
        network=settings.network_on,
        writable=settings.writable,
        shared_plans=tx is None,
    )


class Prepared(Protocol):
    """A sandbox set up ahead of its command (``tools.with_input``)."""

    tx: Transaction | None
    spec: SandboxSpec

    async def run(self, command: str, timeout_ms: int, ctx: ToolContext) -> tuple[_Ran, Report]:
        """Run ``command`` in it (once); what it did and PID 1's report."""
        ...

    def finish(self) -> None:
        """Its command's changes are applied: close its transaction (in the background)."""
        ...


def _plans_dir(root: Path) -> Path:
    path = root / STORE_DIRNAME / PLANS_DIRNAME
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def _hidden_paths(root: Path, settings: SandboxSettings) -> tuple[Path, ...]:
    """The store and the user's coder-es directories, created if missing (a path that does not
    exist cannot be covered, and a command could create it)."""
    paths = [root / ".coder-es", *settings.hidden, *protected_user_dirs()]
    out: list[Path] = []
    for path in paths:
        with contextlib.suppress(OSError):
            if not path.exists():
                path.mkdir(parents=True, mode=0o700)
        real = Path(os.path.realpath(path))
        if real not in out:
            out.append(real)
    return tuple(out)


def _terminal_meta(ran: _Ran, summary: str) -> dict[str, Any]:
    """For a client: the terminal that showed the command, and what the result says beyond the
    output the terminal shows (status, files, notes). Not recorded (``ToolResult.metadata``)."""
    if ran.terminal is None:
        return {}
    return {"terminal": ran.terminal, "summary": summary}


def _output(ran: _Ran, timeout_ms: int) -> list[str]:
    """The output, then one status line (always last)."""
    parts = []
    stdout, stderr = ran.out.text(), ran.err.text()
    if ran.truncated:
        parts.append(
            f"[... the terminal kept only the last {MAX_CAPTURE_BYTES} bytes of the output ...]"
        )
    if stdout:
        parts.append(stdout.rstrip("\n"))
    if stderr:
        parts.append("[stderr]\n" + stderr.rstrip("\n"))
    if ran.timed_out:
        parts.append(f"[timed out after {timeout_ms} ms; everything it started was killed]")
    elif ran.returncode is None and ran.signal:
        parts.append(f"[killed by signal {ran.signal}]")
    else:
        parts.append(f"[exit code {ran.returncode}]")
    return parts


def _listing(changes: tuple[FileChange, ...]) -> str:
    listing = ", ".join(f"{_shown(c.path)} ({_kind(c)})" for c in changes[:20])
    more = f" and {len(changes) - 20} more" if len(changes) > 20 else ""
    return f"[files changed: {listing}{more}]"


def _shown(path: str) -> str:
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _kind(change: FileChange) -> str:
    if change.outcome == "conflict":
        return "conflict: not applied"
    merged = ", merged with a concurrent edit" if change.outcome == "merged" else ""
    if change.before is None:
        return "created" + merged
    if change.after is None:
        return "deleted" + merged
    return "modified" + merged
