"""One turn of a harness: its process tree in one sandbox transaction, its model traffic through
the recording proxy, its stream decoded into session events, its file changes merged at the end.

::

    proxy (127.0.0.1, secret token) ── forwards to the real endpoint, records each exchange
    Transaction.begin ── wrap(SandboxSpec(overlay on the workspace)) ── harness argv
        stdout lines ──adapter.decode──> HarnessEvents ──> live updates + recorded ops
        each tool result: walk the upper directory (the call's own changes; nothing applied)
    harness exits (or is cancelled / bounded) ──> plan + commit: the three-way merge, as bash
    record: [Started] UserMessageAdded, ModelResponded, ToolCallRequested, ToolCallCompleted
            (files_changed per call), ModelExchanged..., HarnessRan

The events are recorded after the apply, in the order things happened: the apply's outcome
(a user's concurrent edit merged, a conflict) is part of each call's ``files_changed``. A read-only
agent (plan, explore) runs the harness on the same overlay and the transaction is dropped: the
workspace is untouched whatever the harness did (its own state directories stay writable).

Every wait is bounded: the whole turn (``turn_timeout_s``), an upstream that refuses connections
(``proxy.CONNECT_FAILURES_LIMIT`` times in a row: the harness would retry for minutes), the
process group's exit after a kill. Ctrl-C / cancel kills the process group (the namespace dies
with it) and applies what the harness did so far, as one transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

from coder_es.agent import updates as up
from coder_es.errors import CoderESError
from coder_es.harness import stream as hs
from coder_es.harness.acp_shim import Asker, PermissionRule, shimmed, stdin_descriptor
from coder_es.harness.adapters import ACP_ROUTES, Adapter, TurnRequest
from coder_es.harness.approve import ROUTE as APPROVE_ROUTE
from coder_es.harness.approve import ApprovalServer
from coder_es.harness.files import Attribution
from coder_es.harness.netns import forwarded
from coder_es.harness.proxy import Exchange, ForwardUpstream, RecordingProxy, Upstream
from coder_es.harness.spec import HarnessSpec, program_places
from coder_es.sandbox import SandboxSettings, Transaction, availability
from coder_es.sandbox.namespaces import SandboxSpec, read_report, wrap
from coder_es.sandbox.transaction import Applied
from coder_es.secret_env import command_environ, scrubbed
from coder_es.store.blobs import digest_of
from coder_es.userdirs import protected_user_dirs

if TYPE_CHECKING:
    from coder_es.application import CoderApp
    from coder_es.domain.session import Session
    from coder_es.permissions.policy import PermissionAnswer

KILL_GRACE_S = 2.0
STDERR_TAIL = 4000

Op = Callable[["Session"], None]


class HarnessFailed(CoderESError):
    """The harness could not run this turn (one line for the user, exit 1)."""


@dataclass
class TurnResult:
    reason: str  # "end_turn" | "error" | "cancelled"
    message: str | None
    harness_session: str | None
    version: str | None
    model: str
    head: str | None = None
    steps: int = 0


@dataclass
class _Segment:
    blocks: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class HarnessTurn:
    """Runs one turn and records it (``run``)."""

    store: CoderApp | Callable[[], CoderApp]
    """The application, or what opens it (and takes the session's lease): called right after
    the harness's process has started, before anything of the turn is stored (``app``); if it
    fails, the harness's process group is killed at once and nothing is applied or recorded
    (``unopened``)."""
    session_id: UUID
    workspace: Path
    spec: HarnessSpec
    adapter: Adapter
    command: list[str]
    emit: Callable[[up.Update], None]
    # The harness and its commands get no coder-es variable or key value (secret_env).
    environ: Mapping[str, str] = field(default_factory=command_environ)
    read_only: bool = False
    yes: bool = False
    agent: str = "build"
    rules: tuple[Any, ...] = ()
    default_permission: str = "ask"
    network: bool = True
    writable: tuple[Path, ...] = ()  # ``[sandbox] writable``, besides the harness's home
    hidden: tuple[Path, ...] = ()
    turn_timeout_s: float = 1800.0
    version: str | None = None
    new_session: dict[str, Any] | None = None  # Started fields for the first turn
    user_prompt: str | None = None  # sent to the harness instead of the prompt (hooks' context)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    started: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the harness's process is started (``HarnessSession.send`` also sets it when the
    turn ends before that): what is done from then on overlaps the harness's own start-up."""
    serve: Upstream | None = None
    """Where the proxy sends every request instead of the real endpoint (replay and fork serve
    recorded answers: ``replay.harness``)."""
    discard: bool = False
    """Drop the transaction at the end, whatever the agent (a fork's rebuild of the harness's
    own state: the workspace is already at the fork's node)."""
    fork_at: str | None = None
    """Resume the harness's session as a fork of it ending at this message of its own
    (Claude Code ``--fork-session --resume-session-at``: ``coder_es.harness.resume``)."""
    ask: Callable[[up.PermissionRequired], Awaitable[PermissionAnswer]] | None = None
    """An interactive run's user (``chat --harness``): a question no rule settles is asked
    (shown as a ``PermissionRequired`` update first) instead of rejected."""
    unopened: BaseException | None = None
    """Why the store given to open after the harness's start did not open (the turn's error)."""

    # state of the turn
    _ops: list[Op] = field(default_factory=list)
    _segment: _Segment | None = None
    _tool_names: dict[str, str] = field(default_factory=dict)
    _tool_started: dict[str, float] = field(default_factory=dict)
    _open_calls: list[str] = field(default_factory=list)
    _files: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    _usage: dict[str, int] = field(default_factory=dict)
    _cost: float | None = None
    _started: hs.HarnessStarted | None = None
    _finished: hs.Finished | None = None
    _notes: list[str] = field(default_factory=list)
    _last_call: str | None = None
    _steps: int = 0
    _request_model: str = ""
    _exchanges: list[Exchange] = field(default_factory=list)
    _stream: list[bytes] = field(default_factory=list)
    _announced: set[str] = field(default_factory=set)

    @property
    def app(self) -> CoderApp:
        if callable(self.store):
            self.store = self.store()
        return self.store

    def state_dirs(self) -> tuple[Path, ...]:
        """Where the harness writes its own state: the home directory (a CLI keeps files such
        as ``~/.claude.json`` directly in it, so no narrower place holds them all)."""
        home = self.environ.get("HOME")
        return (Path(home),) if home and Path(home).is_dir() else ()

    def _model_route(self) -> Path | None:
        """Without network, a private directory for the proxy's Unix socket (None with network).

        Made under the temporary directory outside the sandbox, which has a private ``/tmp`` of
        its own: the directory is one of the sandbox's places carried over it (``writable``), so
        the socket has the same path inside. (It was not, at first: the forwarder in the sandbox
        found no socket and reset every connection, and the harness retried for minutes.)"""
        if self.network:
            return None
        return Path(tempfile.mkdtemp(prefix="coder-es-model-"))

    async def run(self, prompt: str, resume: str | None) -> TurnResult:
        said = prompt
        self._ops.append(lambda s: void(s.add_user_message(said)))
        self.emit(up.UserMessage("", said))
        # What the harness is sent: the prompt, with what UserPromptSubmit hooks added (their
        # ``HookRan`` records it).
        prompt = self.user_prompt or prompt
        # Not probed: the harness's own sandbox reports a failed set-up (one line, below).
        found = await asyncio.to_thread(
            availability, SandboxSettings(mode="auto"), self.workspace, probe=False
        )
        if not found.active:
            raise HarnessFailed(
                f"a harness runs only inside coder-es' sandbox, which is not available here "
                f"({found.reason}); see coder-es doctor"
            )
        user_env = {**self.environ, **scrubbed(self.spec.env)}
        upstream: Upstream = self.serve or ForwardUpstream(self.adapter.upstream(user_env))
        routes: dict[str, Upstream] = {}
        if self.spec.kind == "acp":
            routes = {
                route: self.serve or ForwardUpstream(user_env.get(variable) or default)
                for route, (variable, default) in ACP_ROUTES.items()
            }
        proxy = await RecordingProxy(upstream, routes=routes, on_exchange=self._exchange()).start()
        tx = await asyncio.to_thread(Transaction.begin, self.workspace)
        attribution = Attribution(self.workspace, tx.upper, self._put)
        t0 = time.monotonic()
        exit_code: int | None = None
        outcome = "ok"
        message: str | None = None
        applied: list[Applied] = []
        route_dir: Path | None = None
        storing: asyncio.Future[None] | None = None
        stored: BaseException | None = None
        try:
            route_dir = await asyncio.to_thread(self._model_route)
            prompt_tool = self.spec.kind == "claude-code" and not self.yes and not self.read_only
            if prompt_tool:
                approvals = ApprovalServer(
                    self._rule(), self.workspace, self._record_decision, self._asker()
                )
                approvals.seen = self._seen
                proxy.local[APPROVE_ROUTE] = approvals.handle
            request = TurnRequest(
                prompt=prompt,
                resume=resume,
                read_only=self.read_only,
                yes=self.yes,
                workspace=str(self.workspace),
                proxy_url=proxy.base_url,
                prompt_tool=prompt_tool,
                fork_at=self.fork_at if resume else None,
            )
            sandbox = SandboxSpec(
                workspace=self.workspace,
                cwd=self.workspace,
                upper=tx.upper,
                work=tx.work,
                fstab=tx.path / "mounts.fstab",
                hidden=self.hidden,
                network=self.network,
                # The harness keeps its own state (~/.claude, ~/.claude.json, ~/.codex,
                # ~/.gemini: sessions, settings, caches) outside the transaction, as when the
                # user runs it; the sandbox is otherwise an allow-list of writable places.
                writable=(
                    *self.state_dirs(),
                    *self.writable,
                    *([route_dir] if route_dir else []),
                ),
                # A program installed under /tmp stays visible over the private /tmp.
                readable=program_places(self.command[0]),
            )
            inner = self.adapter.argv(self.command, request)
            acp_stdin: tuple[int, int] | None = None
            if self.spec.kind == "acp":
                acp_stdin = stdin_descriptor()
                inner = shimmed(inner, acp_stdin[0])
            if route_dir is not None:
                # No network for the harness's commands: its model is reached through the
                # proxy's Unix socket, relayed on the namespace's own loopback (netns.py).
                route = str(route_dir / "proxy.sock")
                await proxy.listen_unix(route)
                inner = forwarded(inner, route, proxy.port)
            argv = wrap(sandbox, inner)
            env = {
                **self.environ,
                **scrubbed(self.spec.env),
                **self.adapter.env(request, self.environ),
                "GIT_DISCOVERY_ACROSS_FILESYSTEM": "1",
            }
            try:
                exit_code, stderr, outcome, message = await self._drive(
                    argv, env, proxy, attribution, acp_stdin, prompt, resume
                )
            except BaseException:
                # Whatever ended the turn (a task cancelled from outside, a failure of ours),
                # what the harness did lands, as one transaction: recording never changes an
                # effect. The turn's record is lost with the exception.
                # Synchronously: a cancelled await must not leave an apply running while the
                # transaction is closed.
                # (Not when the store did not open: the harness was stopped as it started.)
                if not self.read_only and not self.discard and not callable(self.store):
                    with contextlib.suppress(Exception):
                        self._commit(tx)
                raise
            # The harness has exited: once the proxy is closed it holds every exchange. Their
            # bodies are stored while the changes are applied and the transaction removed (each
            # mostly waits for its own disk writes), and before the events that name them.
            await proxy.aclose()
            storing = asyncio.ensure_future(asyncio.to_thread(self._store_exchanges))
            if not self.read_only and not self.discard:
                applied = await asyncio.to_thread(self._commit, tx)
        finally:
            await proxy.aclose()
            await asyncio.to_thread(tx.close)
            if route_dir is not None:
                shutil.rmtree(route_dir, ignore_errors=True)
            if storing is not None:
                await asyncio.wait({storing})
                stored = storing.exception()  # retrieved here, raised below (not over another)
        if stored is not None:
            raise stored
        if outcome == "ok" and self._finished is not None and not self._finished.ok:
            outcome, message = "error", self._finished.error
        if outcome == "ok" and self._finished is None:
            outcome = "error"
            tail = stderr.strip().splitlines()[-1:] if stderr.strip() else []
            message = (
                f"the {self.spec.name} harness exited ({exit_code}) without finishing its turn"
                + (f": {tail[0]}" if tail else "")
            )
        self._close_segment("end_turn" if outcome == "ok" else outcome)
        for call in list(self._open_calls):
            why = "cancelled" if outcome == "cancelled" else "the harness ended without a result"
            self._complete(call, f"[{why}]", True)
        self._files = attribution.files_changed(applied, self._last_call)
        unplaced = [c for c in self._files if c not in self._tool_names]
        for call in unplaced:
            # Changes no call of the stream can own (a harness with no tool boundaries).
            self._synthetic_call(call)
        duration_ms = int((time.monotonic() - t0) * 1000)
        started = self._started or hs.HarnessStarted(resume)
        session_ref = started.session_id or resume
        version = started.version or self.version
        reason = "end_turn" if outcome == "ok" else outcome
        self._ops.append(
            lambda s: s.record_harness_run(
                harness=self.spec.name,
                kind=self.spec.kind,
                harness_session=session_ref,
                version=version,
                exit_code=exit_code,
                duration_ms=duration_ms,
                cost_usd=self._cost,
                outcome=outcome,
                message=message,
                yes=self.yes,
                stream_blob=digest_of(b"".join(self._stream)) if self._stream else None,
            )
        )
        if outcome == "error" and message:
            self._ops.append(lambda s: s.record_error(kind="HarnessError", message=message))
        if outcome == "cancelled":
            self._ops.append(lambda s: s.cancel(reason="cancelled by the user"))
        model = started.model or self._request_model
        head = await asyncio.to_thread(self._record, session_ref, version, model)
        if outcome == "error" and message:
            self.emit(up.Error("HarnessError", message, False))
        if outcome == "cancelled":
            self.emit(up.TurnCancelled("cancelled by the user"))
        self.emit(up.TurnEnded(reason, self._steps, head))
        return TurnResult(reason, message, session_ref, version, model, head, self._steps)

    # ------------------------------------------------------------------ the process

    async def _drive(
        self,
        argv: list[str],
        env: dict[str, str],
        proxy: RecordingProxy,
        attribution: Attribution,
        acp_stdin: tuple[int, int] | None,
        prompt: str,
        resume: str | None,
    ) -> tuple[int | None, str, str, str | None]:
        read_end, write_end = os.pipe()
        reading = asyncio.ensure_future(asyncio.to_thread(read_report, read_end))
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                cwd=str(self.workspace),
                stdin=write_end,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                env=env,
                limit=1 << 24,
                pass_fds=(acp_stdin[0],) if acp_stdin else (),
            )
        finally:
            os.close(write_end)
            if acp_stdin is not None:
                os.close(acp_stdin[0])
        if callable(self.store):
            try:
                self.app  # noqa: B018 - opens the store, takes the session's lease
            except BaseException as e:
                self.unopened = e
                _kill_group(proc.pid, signal.SIGKILL)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(proc.wait(), KILL_GRACE_S * 5)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(reading, KILL_GRACE_S)
                raise
        self.started.set()
        with contextlib.suppress(Exception):  # what fails here fails again where it is needed
            self._prepare()
        err_tail = bytearray()

        async def pump_err() -> None:
            assert proc.stderr is not None
            while chunk := await proc.stderr.read(65536):
                err_tail.extend(chunk)
                del err_tail[:-STDERR_TAIL]

        async def pump_out() -> None:
            assert proc.stdout is not None
            while line := await proc.stdout.readline():
                self._stream.append(line)
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                if isinstance(obj, dict):
                    for event in self.adapter.decode(obj):
                        await self._on(event, attribution)

        async def converse() -> None:
            # Imported here: the ACP schema costs a second of start-up to the other kinds.
            from coder_es.harness.acp import converse as acp_converse

            assert acp_stdin is not None

            async def on_event(event: hs.HarnessEvent) -> None:
                await self._on(event, attribution)

            await acp_converse(
                proc,
                acp_stdin[1],
                err_tail,
                on_event,
                workspace=self.workspace,
                rule=self._rule(),
                record_decision=self._record_decision,
                prompt=prompt,
                resume=resume,
                ask=self._asker(),
            )
            await _stop(proc)

        pumps = asyncio.gather(converse() if acp_stdin else pump_out(), pump_err())
        watchers: dict[asyncio.Future[Any], str] = {
            asyncio.ensure_future(self.cancelled.wait()): "cancelled",
            asyncio.ensure_future(proxy.unreachable.wait()): "unreachable",
        }
        outcome, message = "ok", None
        try:
            waited: list[asyncio.Future[Any]] = [pumps, *watchers]
            done, _ = await asyncio.wait(
                waited, timeout=self.turn_timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
            if pumps not in done:
                which = next((watchers[w] for w in done if w in watchers), "timeout")
                if which == "cancelled":
                    outcome, message = "cancelled", "cancelled by the user"
                elif which == "unreachable":
                    outcome, message = "error", f"{self.spec.name}: {proxy.unreachable_reason}"
                else:
                    outcome = "error"
                    message = (
                        f"the {self.spec.name} harness did not finish its turn within "
                        f"{self.turn_timeout_s:.0f} s"
                    )
                await _stop(proc)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(pumps, KILL_GRACE_S)
            try:
                await asyncio.wait_for(proc.wait(), KILL_GRACE_S * 5)
            except TimeoutError:
                # Its output is closed but it lingers (a child it left): bounded, then killed.
                await _stop(proc)
        except asyncio.CancelledError:
            await _stop(proc)
            raise
        finally:
            for w in watchers:
                w.cancel()
            if proc.returncode is None:
                _kill_group(proc.pid, signal.SIGKILL)
        report = await reading
        if not report.ready and outcome == "ok":
            why = report.setup_failure or err_tail.decode("utf-8", "replace").strip()[-300:]
            raise HarnessFailed(
                f"the {self.spec.name} harness did not start: its sandbox could not be set up "
                f"({why}; see coder-es doctor)"
            )
        return proc.returncode, err_tail.decode("utf-8", "replace"), outcome, message

    def _prepare(self) -> None:
        """What the turn would otherwise do for the first time while the harness works, done
        while it starts up (hundreds of milliseconds in which it asks nothing of us): compiling
        the redaction rules that screen every stored blob and event (RE2 holds the GIL for
        ~25 ms; at the first tool call's file walk that held up the proxy, and with it the
        harness's next model request), and, when the turn may ask for permissions, loading the
        shell grammar its rules match command lines with. Nothing is recorded or changed."""
        self.app.sealing.redactor.prepare()
        if not self.yes:
            importlib.import_module("coder_es.permissions.shell_parse")

    # ------------------------------------------------------------------ stream -> ops

    async def decode_recorded(self, stream: bytes, cancelled: bool = False) -> list[Op]:
        """What a recorded stream records, through the current adapter and this turn's own
        recording of it, with no process and no files (``replay``'s verify mode)."""
        attribution = _NoFiles()
        for line in stream.splitlines():
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                for event in self.adapter.decode(obj):
                    await self._on(event, attribution)  # type: ignore[arg-type]
        finished = self._finished
        outcome = "cancelled" if cancelled else "ok" if finished and finished.ok else "error"
        self._close_segment("end_turn" if outcome == "ok" else outcome)
        for call in list(self._open_calls):
            why = "cancelled" if outcome == "cancelled" else "the harness ended without a result"
            self._complete(call, f"[{why}]", True)
        return list(self._ops)

    async def _on(self, event: hs.HarnessEvent, attribution: Attribution) -> None:
        if isinstance(event, hs.HarnessStarted):
            self._started = event
        elif isinstance(event, hs.Text):
            if not event.text:
                return
            seg = self._open_segment()
            if seg.blocks and seg.blocks[-1]["type"] == "text":
                seg.blocks[-1]["text"] += event.text
            else:
                seg.blocks.append({"type": "text", "text": event.text})
            self.emit(up.TextDelta(event.text))
        elif isinstance(event, hs.Thinking):
            self._open_segment().blocks.append({"type": "thinking", "thinking": event.text})
        elif isinstance(event, hs.ToolUse):
            self._open_segment().blocks.append(
                {"type": "tool_use", "id": event.id, "name": event.name, "input": event.input}
            )
            self._tool_names[event.id] = event.name
            self._tool_started[event.id] = time.monotonic()
            self._open_calls.append(event.id)
            if event.id not in self._announced:
                self.emit(up.ToolStarted(event.id, event.name, dict(event.input)))
        elif isinstance(event, hs.ToolResult):
            if event.id not in self._tool_names:
                self._open_segment().blocks.append(
                    {
                        "type": "tool_use",
                        "id": event.id,
                        "name": event.name or "tool",
                        "input": event.input or {},
                    }
                )
                self._tool_names[event.id] = event.name or "tool"
                self._open_calls.append(event.id)
            self._close_segment("tool_use")
            await asyncio.to_thread(attribution.boundary, event.id)
            self._last_call = event.id
            self._complete(event.id, event.output, event.is_error)
        elif isinstance(event, hs.Usage):
            self._usage = event.usage
            self._cost = event.cost_usd
        elif isinstance(event, hs.Denied):
            denied = event

            def deny(s: Session) -> None:
                s.decide_permission(
                    tool_use_id=denied.id,
                    tool=denied.tool,
                    subject=denied.tool,
                    decision="deny",
                    decided_by="client",
                    reason=denied.reason,
                )

            self._ops.append(deny)
        elif isinstance(event, hs.Finished):
            self._finished = event
        elif isinstance(event, hs.Note):
            self._notes.append(event.text)

    def _open_segment(self) -> _Segment:
        if self._segment is None:
            self._segment = _Segment()
        return self._segment

    def _close_segment(self, stop_reason: str) -> None:
        seg, self._segment = self._segment, None
        if seg is None or not seg.blocks:
            return
        self._steps += 1
        model = lambda: self._started.model if self._started else ""  # noqa: E731
        final = stop_reason != "tool_use"
        usage_ref = self

        def respond(s: Session, blocks: list[dict[str, Any]] = seg.blocks) -> None:
            node = s.record_model_response(
                blocks=blocks,
                stop_reason=stop_reason,
                usage=dict(usage_ref._usage) if final else {},
                provider=f"harness:{self.spec.name}",
                model=model(),
            )
            for b in blocks:
                if b["type"] == "tool_use":
                    s.request_tool_call(
                        node=node, tool_use_id=b["id"], name=b["name"], input=b["input"]
                    )

        self._ops.append(respond)
        text = "".join(b.get("text", "") for b in seg.blocks if b["type"] == "text")
        calls = sum(1 for b in seg.blocks if b["type"] == "tool_use")
        self.emit(up.ModelResponse("", self._steps, stop_reason, text, calls))

    def _complete(self, call: str, output: str, is_error: bool) -> None:
        if call in self._open_calls:
            self._open_calls.remove(call)
        name = self._tool_names.get(call, "tool")
        started = self._tool_started.get(call)
        duration_ms = int((time.monotonic() - started) * 1000) if started else 0

        def complete(s: Session) -> None:
            s.complete_tool_call(
                tool_use_id=call,
                name=name,
                output=output,
                is_error=is_error,
                duration_ms=duration_ms,
                files_changed=self._files.get(call, []),
            )

        self._ops.append(complete)
        self.emit(up.ToolCompleted(call, name, output, is_error, duration_ms, False))

    def _synthetic_call(self, call: str) -> None:
        self._tool_names[call] = "harness_files"

        def respond(s: Session) -> None:
            node = s.record_model_response(
                blocks=[{"type": "tool_use", "id": call, "name": "harness_files", "input": {}}],
                stop_reason="tool_use",
                usage={},
                provider=f"harness:{self.spec.name}",
                model="",
            )
            s.request_tool_call(node=node, tool_use_id=call, name="harness_files", input={})
            s.complete_tool_call(
                tool_use_id=call,
                name="harness_files",
                output="files the harness changed outside any tool call it reported",
                files_changed=self._files.get(call, []),
            )

        self._ops.append(respond)

    def _seen(self, call: str, name: str, tool_input: dict[str, Any]) -> None:
        """A call the harness asks about before its stream shows it: announced now, so the
        decision that follows names a known call."""
        if call not in self._tool_names and call not in self._announced:
            self._announced.add(call)
            self.emit(up.ToolStarted(call, name, dict(tool_input)))

    def _rule(self) -> PermissionRule:
        return PermissionRule(
            self.read_only, self.yes, self.agent, self.rules, self.default_permission
        )

    def _asker(self) -> Asker | None:
        if self.ask is None or self.yes:
            return None
        ask = self.ask

        async def asked(
            call: str, tool: str, subject: str, tool_input: dict[str, Any], why: str
        ) -> tuple[bool, str]:
            question = up.PermissionRequired(call, tool, subject, tool_input, "", why, subject)
            self.emit(question)
            answer = await ask(question)
            if answer.decision == "allow":
                return True, answer.reason or "allowed by the user"
            return False, answer.reason or "rejected by the user"

        return asked

    def _record_decision(
        self, call: str, tool: str, subject: str, allowed: bool, by: str, reason: str
    ) -> None:
        decision = "allow" if allowed else "deny"
        self._ops.append(
            lambda s: s.decide_permission(
                tool_use_id=call,
                tool=tool,
                subject=subject,
                decision=decision,
                decided_by=by,
                reason=reason,
            )
        )
        self.emit(up.PermissionDecision(call, tool, subject, decision, "once", by, None, reason))

    def _exchange(self) -> Callable[[Exchange], None]:
        def on_exchange(x: Exchange) -> None:
            if not self._request_model:
                # The model the harness asked for (Codex's stream never names it).
                with contextlib.suppress(ValueError, AttributeError):
                    self._request_model = str(json.loads(x.request_body).get("model") or "")

            self._exchanges.append(x)

            # The bodies are stored when the turn is recorded (in one write, off the event
            # loop: a durable write per body here would hold the harness's next request).
            def record(s: Session) -> None:
                s.record_exchange(
                    harness=self.spec.name,
                    method=x.method,
                    path=x.path,
                    request_headers=x.request_headers,
                    request_blob=digest_of(x.request_body),
                    status=x.status,
                    response_headers=x.response_headers,
                    response_blob=digest_of(x.response_body),
                    duration_ms=int(x.duration_ms),
                    error=x.error,
                )

            self._ops.append(record)

        return on_exchange

    # ------------------------------------------------------------------ apply + record

    def _put(self, data: bytes) -> str:
        """Store a blob of the session (a file's content a call changed)."""
        return self.app.blobs.for_session(self.session_id).put(data)

    def _commit(self, tx: Transaction) -> list[Applied]:
        blobs = self.app.blobs.for_session(self.session_id)
        views = {}
        if not self.new_session:
            # Imported here: a first turn, whose harness starts sooner without it, has no views.
            from coder_es.workspace.workspace import Workspace

            views = Workspace.views_from_events(self.app.unsealed_events(self.session_id))
        plan = tx.plan(self.workspace, views, blobs, protected=self.hidden)
        outcome = tx.commit(plan, self.workspace, blobs)
        self._notes.extend(outcome.notes)
        return outcome.applied

    def _store_exchanges(self) -> None:
        items: list[tuple[bytes, str | None]] = []
        last: str | None = None
        for x in self._exchanges:
            # Each request repeats the conversation so far: stored as a delta of the last one.
            items.append((x.request_body, last))
            last = digest_of(x.request_body)
            items.append((x.response_body, None))
        if self._stream:
            # The harness's own stream, as it printed it: what ``replay`` decodes again.
            items.append((b"".join(self._stream), None))
        if items:
            self.app.blobs.for_session(self.session_id).put_many(items)

    def _record(self, harness_session: str | None, version: str | None, model: str) -> str | None:
        """Save the turn's events (the exchanges' bodies are stored: ``_store_exchanges``)."""
        from coder_es.domain.session import Session

        if self.new_session is not None:
            fields = dict(self.new_session)
            settings = dict(fields.pop("settings", {}))
            harness = dict(settings.get("harness") or {})
            harness.update({"session_id": harness_session, "version": version})
            settings["harness"] = harness
            session = Session.start(
                id=self.session_id,
                settings=settings,
                model=model,
                sealing=self.app.sealing,
                **fields,
            )
        else:
            session = self.app.get_session(self.session_id)
        for op in self._ops:
            op(session)
        self.app.save(session)
        return session.head


class _NoFiles:
    """Tool boundaries without a transaction to walk (a recorded stream decoded again)."""

    def boundary(self, call: str) -> None:
        return None


def void(_: object) -> None:
    """An op records events; what the recording method returns (a node id) is not needed."""


async def _stop(proc: asyncio.subprocess.Process) -> None:
    _kill_group(proc.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), KILL_GRACE_S)
    except TimeoutError:
        pass
    _kill_group(proc.pid, signal.SIGKILL)


def _kill_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def hidden_paths(workspace: Path, store: Path | None) -> tuple[Path, ...]:
    """The store and the user's coder-es directories, hidden from the harness as from bash."""
    paths = [workspace / ".coder-es", *([store] if store else []), *protected_user_dirs()]
    out: list[Path] = []
    for path in paths:
        with contextlib.suppress(OSError):
            path.mkdir(parents=True, exist_ok=True, mode=0o700)
        real = Path(os.path.realpath(path))
        if real not in out:
            out.append(real)
    return tuple(out)
