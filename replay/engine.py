"""The replay engine: the current loop code run against a cassette, compared event by event.

A replay starts the recorded session again in a fresh store under the same session id (so node
ids, which are event versions, line up), with the agent loop of the current code behind its
seams (``coder_es.service.api.AgentService`` builds it, as for a real run):

- the model is a ``ReplayProvider``: recorded responses in order, each after checking that the
  request the current code built is the recorded one;
- tools are served from the recording (``verify`` mode: no command runs, no file the user owns is
  touched) or run for real in a scratch workspace restored from the cassette (``live`` mode, where
  their outputs are compared too). Edits the user made during the recorded session are made
  again in the scratch workspace right before the step that saw them (``replay.disk``);
- permission questions are answered from the recording (a question the recording parked,
  ``PermissionDeferred`` from ``run --defer`` or a client, is answered ``defer`` again; its later
  answer from ``coder-es approve`` / ``deny`` is the user's side, below);
- subagents (``task`` calls): verify mode serves the task's result from the recording and then
  replays each child from its own cassette (``areplay_cassette``); live mode runs each child
  again, as a new session forked from the replayed parent under its recorded id, with a child
  engine of its own serving its model calls and answers from its cassette and running its
  tools in the shared scratch workspace (``replay.children``);
- the user's side is replayed at the points it was recorded: messages, fork / checkout / rewind /
  label (``coder_es.branching``, on the scratch workspace), permission rule changes
  (``SessionHandle.update_permissions``), answers to parked questions (``DeferredAnswered``,
  through ``service.waiting.answer``), and cancellations (a recorded ``TurnCancelled`` cancels
  the turn where it happened).

The new events are compared with the recorded ones as they appear, under ``replay.normalize``; the
first difference stops the replay and is reported (``replay.report.Divergence``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import os
import shutil
import tempfile
import time
import traceback
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, NoReturn
from uuid import UUID

from coder_es.agent import updates as up
from coder_es.agent.decider import ABANDONED
from coder_es.agent.runner import AgentLoop, LoopConfig
from coder_es.agent.settings import rules_from_records
from coder_es.branching import Branching
from coder_es.config.values import McpServerConfig
from coder_es.domain.chain import SEALED_FORMS
from coder_es.domain.session import Session
from coder_es.errors import CoderESError
from coder_es.hooks.answer import Ran
from coder_es.hooks.pipeline import tool_part
from coder_es.hooks.spec import HookSpec
from coder_es.mcp.tool import McpSource
from coder_es.permissions.policy import PermissionAnswer
from coder_es.permissions.schedule import window_of
from coder_es.records import event_fields, event_kind
from coder_es.sealing import resolve_env_markers
from coder_es.service.api import AgentService, SessionHandle, SessionOptions
from coder_es.service.tasks import ChildSeams
from coder_es.service.waiting import answer as answer_parked
from coder_es.store.config import StoreConfig
from coder_es.tools.base import FileChange, ToolCall, ToolContext, ToolResult
from coder_es.tools.registry import LocalExecutor, ToolRegistry, default_registry
from coder_es.workspace import git_state
from coder_es.workspace.confined import ConfinedDir
from replay import disk
from replay.app import ReplayApp
from replay.cassette import Cassette, CassetteError, RecordedEvent
from replay.children import ReplaySpawner
from replay.normalize import Normalizer, compared_fields
from replay.provider import ReplayProvider, RequestMatcher, model_calls
from replay.report import (
    Divergence,
    ReplayMismatch,
    ReplayReport,
    contrast,
    diff_values,
    first_difference,
    lookup,
)

MODES = ("verify", "live")
_PROMPT_HOOKS = ("SessionStart", "UserPromptSubmit")
_SUMMARY_PRIORITY = ["tool_use_id", "name", "tool", "path", "decision", "node", "outcome", "output"]
DEFAULT_MAX_STEPS = 50
HOLD_POLL_S = 0.005
HOLD_STALL_S = 30.0
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class ReplayOptions:
    mode: str = "verify"
    workspace: Path | None = None
    """The scratch workspace (default: a new temporary directory, removed afterwards)."""
    keep_workspace: bool = False
    session_id: UUID | None = None
    """Default: the recorded session id."""
    tools: ToolRegistry | None = None
    """The tools of the current code (default: ``default_registry()``)."""
    max_steps: int | None = None
    """Default: the cassette's ``options.max_steps``, else the one the session recorded in its
    Started settings, else inferred from the recording (cassettes from before it was recorded)."""
    progress: Progress | None = None
    config: LoopConfig = field(default_factory=LoopConfig)
    repositories: tuple[Path, ...] = ()
    """Live mode, for a session recorded in a git repository: where to look for its commit
    before the recorded repository (``coder_es.workspace.git_state``)."""
    mcp_servers: tuple[McpServerConfig, ...] = ()
    """Live mode: the MCP servers to call (verify mode serves the recorded tools and results
    and needs none); tools or results that differ from the recording are divergences."""
    network: bool | None = None
    """Live mode of a harness session: whether the harness's commands get the network
    (``[sandbox] network``; default: they do, as in a run)."""
    harnesses: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Live mode of a harness session: the configuration's ``[harnesses]``; the recorded
    harness runs as ``run --session`` would continue it (``coder_es.harness.spec.continuing``:
    its ``[harnesses.NAME]`` now, ``env`` included)."""


# Events of the user's side: a child session's recording may go on with them after its task.
_USER_SIDE = frozenset(
    {
        "UserMessageAdded",
        "WorkspaceRestored",
        "HeadMoved",
        "NodeLabelled",
        "PermissionsChanged",
        "ContextCompacted",
        "TurnResumed",
        "SettingsChanged",
        "Archived",
        "Unarchived",
    }
)


class _Diverged(Exception):
    def __init__(self, divergence: Divergence) -> None:
        super().__init__(divergence.summary)
        self.divergence = divergence


@dataclass
class _ToolRun:
    name: str
    input: dict[str, Any]
    key: str
    at: int
    """The index of its ToolCallRequested in the recording."""
    sink: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    completed: dict[str, Any] | None = None
    interrupted: bool = False
    """The recorded turn was cancelled while it ran (its result is the loop's closing)."""

    def child_session(self) -> str | None:
        """The subagent a ``task`` call started in the recording."""
        for kind, fields in self.sink:
            if kind == "TaskStarted":
                return str(fields["child_session"])
        return None


def _plain(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if k != "prev_hash"}


def infer_max_steps(events: tuple[RecordedEvent, ...] | list[RecordedEvent]) -> int:
    """The step limit the recorded run must have had: the steps of a recorded StepLimitReached
    (or, in recordings made before that event existed, of a turn that stopped with tool calls
    answered and no further model call), else at least the default."""
    limits: list[int] = []
    longest = 0
    steps, last_stop, stopped_early = 0, "", False

    def close() -> None:
        if steps and last_stop in ("tool_use", "pause_turn") and not stopped_early:
            limits.append(steps)

    for e in events:
        if e.kind == "UserMessageAdded":
            close()
            steps, last_stop, stopped_early = 0, "", False
        elif e.kind == "ModelResponded":
            steps += 1
            longest = max(longest, steps)
            last_stop = str(e.fields.get("stop_reason"))
        elif e.kind == "StepLimitReached":
            limits.append(int(e.fields.get("steps") or steps))
            stopped_early = True  # counted already
        elif e.kind in ("TurnCancelled", "ErrorRecorded", "HeadMoved"):
            stopped_early = True
    close()
    return min(limits) if limits else max(DEFAULT_MAX_STEPS, longest)


class _Scratch:
    """The scratch workspace: files written from cassette blobs."""

    def __init__(self, root: Path, blob: Callable[[str], bytes]) -> None:
        self.root = root
        self.blob = blob

    def put(self, path: str, digest: str | None) -> None:
        if not disk.relative(path):
            return
        # A replayed command may have left links in the scratch workspace: never followed.
        with ConfinedDir(self.root) as confined:
            try:
                current = confined.read(path)
            except (OSError, CoderESError):
                return  # a link or a directory there: the comparison will show what differs
            now = None if current is None else hashlib.sha256(current).hexdigest()
            if now == digest:
                return
            if digest is None:
                with contextlib.suppress(FileNotFoundError):
                    confined.path(path).unlink()
                return
            try:
                data = self.blob(digest)
            except Exception:
                return  # not in the cassette: the comparison will show what differs
            with contextlib.suppress(OSError, CoderESError):
                confined.path(path, create=True).write_bytes(data)


class ReplayEngine:
    def __init__(
        self,
        cassette: Cassette,
        app: ReplayApp,
        options: ReplayOptions,
        *,
        parent: ReplayEngine | None = None,
        task_call: str = "",
        initial: dict[str, str | None] | None = None,
    ) -> None:
        """``parent``: this engine replays, live, a subagent the parent's ``task_call``
        started; ``initial`` is what the disk held, by the recording, when the child started."""
        if options.mode not in MODES:
            msg = f"unknown replay mode {options.mode!r}; choose verify or live"
            raise ValueError(msg)
        self.cassette = cassette
        self.app = app
        self.options = options
        self.mode = options.mode
        # A recorded event's sealed_forms say how the recording store kept its sealed blobs;
        # the replay re-enacts the event through the session's methods, which record their own.
        self.recorded = tuple(
            dataclasses.replace(e, fields={k: v for k, v in e.fields.items() if k != SEALED_FORMS})
            if SEALED_FORMS in e.fields
            else e
            for e in cassette.events
        )
        self.sid = options.session_id or UUID(cassette.session)
        self.parent = parent
        self.task_call = task_call
        self.top: ReplayEngine = self if parent is None else parent.top
        self.child_loop: AgentLoop | None = None
        if parent is None:
            self.app.watched = self.sid
            self.observed = self.app.observed
        else:
            self.observed = self.app.watch_child(self.sid)
        # The top engine's: the first divergence found inside a subagent (it stops the replay
        # at the next seam of any engine, and is what the report names).
        self.deferred: Divergence | None = None
        self.child_counts = [0, 0]  # model calls, tool calls of the subagents run again
        self.child_notes: list[str] = []
        self._counted = False
        self.running_children: set[ReplayEngine] = set()  # the top engine's
        self.holding: set[ReplayEngine] = set()
        self._turn_cancelled = False
        # One normalization for both sides: recorded inputs (the system prompt) carry the
        # recorded workspace path into the replay, and the scratch path appears in new output.
        self.recorded_norm = self._normalizer(cassette.workspace)
        self.replayed_norm = self.recorded_norm
        self._expected: dict[int, dict[str, Any]] = {}
        self.compared = 0
        self.handle: SessionHandle | None = None
        self.tools = options.tools or default_registry()
        self.live = LocalExecutor(self.tools) if self.mode == "live" else None
        self.tool_calls = 0
        self.secret_notes: list[str] = []
        self._index(initial)
        self.max_steps = (
            options.max_steps
            or int(cassette.options.get("max_steps") or 0)
            or int(
                (self.recorded[0].fields.get("settings") or {}).get("max_steps") or 0
                if self.recorded
                else 0
            )
            or infer_max_steps(self.recorded)
        )
        self._last_progress = -1

    def _normalizer(self, *roots: str | Path | None) -> Normalizer:
        # The recording holds secrets' redacted form; a live replay may see them again.
        return dataclasses.replace(
            Normalizer.for_workspace(*roots), redactor=self.app.sealing.redactor
        )

    # ------------------------------------------------------------------ recording index

    def _index(self, initial: dict[str, str | None] | None = None) -> None:
        self.runs: dict[str, deque[_ToolRun]] = {}
        self.answers: dict[str, deque[dict[str, Any]]] = {}
        # Hook runs by (event, call): verify mode serves them in order instead of running hooks.
        self.hook_runs: dict[tuple[str, str | None], deque[dict[str, Any]]] = {}
        self.post_effects: dict[str, list[dict[str, Any]]] = {}
        occurrences: dict[str, int] = {}
        open_runs: dict[str, _ToolRun] = {}
        answered_later: set[str] = set()
        cancelled_at = -1
        for at, e in enumerate(self.recorded):
            f = e.fields
            if e.kind == "ToolCallRequested":
                cid = str(f["tool_use_id"])
                occurrences[cid] = occurrences.get(cid, 0) + 1
                key = f"{cid}#{occurrences[cid]}"
                run = _ToolRun(str(f["name"]), dict(f["input"]), key, at)
                self.runs.setdefault(cid, deque()).append(run)
                open_runs[cid] = run
            elif (
                e.kind in ("FileObserved", "EditApplied", "TaskStarted")
                and f.get("tool_use_id") in open_runs
            ):
                open_runs[str(f["tool_use_id"])].sink.append((e.kind, _plain(f)))
            elif e.kind == "ToolCallCompleted" and f.get("tool_use_id") in open_runs:
                run = open_runs.pop(str(f["tool_use_id"]))
                run.completed = _plain(f)
                run.interrupted = cancelled_at > run.at
            elif e.kind == "TurnCancelled":
                cancelled_at = at
            elif e.kind == "PermissionDeferred" and f.get("source") not in ("rule", "hook"):
                # Parked by whoever answered the question (``run --defer``, a client): that
                # answer, served at the same question, parks it again.
                deferred = {"decision": "defer", "scope": "once", "decided_by": f["source"]}
                self.answers.setdefault(str(f["tool_use_id"]), deque()).append(deferred)
            elif e.kind == "DeferredAnswered":
                # The answer to a parked question is the user's side (``coder-es approve``),
                # replayed where it was recorded (``_drive``), not served at a question.
                answered_later.add(str(f["tool_use_id"]))
            elif e.kind == "PermissionDecided" and f.get("decided_by") not in (
                "rule",
                "hook",
                "schedule",  # the loop decides it by the (replayed) clock
            ):
                if str(f["tool_use_id"]) in answered_later:
                    answered_later.discard(str(f["tool_use_id"]))
                    continue
                self.answers.setdefault(str(f["tool_use_id"]), deque()).append(_plain(f))
            elif e.kind == "HookRan":
                hook_key = (str(f["hook_event"]), f.get("tool_use_id"))
                self.hook_runs.setdefault(hook_key, deque()).append(_plain(f))
                if f["hook_event"] in ("PostToolUse", "PostToolUseFailure"):
                    effects = self.post_effects.setdefault(str(f["tool_use_id"]), [])
                    effects.append(dict(f.get("effect") or {}))
        self.initial = dict(self.cassette.files if initial is None else initial)
        self.edits = disk.external_edits(_with_call_keys(self.recorded), self.initial)
        self.calls = model_calls(self.recorded)

    # ------------------------------------------------------------------ comparing

    def current(self) -> list[Any]:
        events = self.observed
        loop = self.handle.loop if self.handle is not None else self.child_loop
        if loop is not None and loop.session.pending_events:
            return [*events, *loop.session.pending_events]
        return events

    def expected_event(self, index: int) -> dict[str, Any]:
        cached = self._expected.get(index)
        if cached is None:
            e = self.recorded[index]
            cached = self.recorded_norm.event(e.kind, e.fields)
            self._expected[index] = cached
        return cached

    def check(self) -> None:
        events = self.current()
        while self.compared < len(events):
            i = self.compared
            e = events[i]
            kind = event_kind(e)
            if i < len(self.recorded) and self.recorded[i].kind == kind:
                # Most events are equal before normalization: skip normalizing those.
                raw = compared_fields(kind, event_fields(e))
                if raw == compared_fields(kind, self.recorded[i].fields):
                    self.compared += 1
                    continue
            actual = self.replayed_norm.event(kind, event_fields(e))
            if i >= len(self.recorded):
                raise _Diverged(
                    Divergence(
                        step=i + 1,
                        kind=actual["kind"],
                        what="extra",
                        expected=None,
                        actual=actual,
                        diff=diff_values(None, actual),
                        summary=(
                            f"step {i + 1}: the current code records {actual['kind']} after the "
                            f"recording's last event ({len(self.recorded)})"
                        ),
                    )
                )
            expected = self.expected_event(i)
            if actual != expected:
                raise _Diverged(self._event_divergence(i, expected, actual))
            self.compared += 1
        self._progress()

    def _event_divergence(
        self, i: int, expected: dict[str, Any], actual: dict[str, Any]
    ) -> Divergence:
        where = first_difference(expected, actual) or "?"
        if where == "kind":
            summary = (
                f"step {i + 1}: the recording has {expected['kind']} here, the current code "
                f"records {actual['kind']}"
            )
        else:
            ef, af = expected["fields"], actual["fields"]
            keys = [k for k in [*ef, *(k for k in af if k not in ef)] if ef.get(k) != af.get(k)]
            # Name the field that identifies what changed before its consequences (a different
            # path before the different hash and size that follow from it).
            keys.sort(key=lambda k: _SUMMARY_PRIORITY.index(k) if k in _SUMMARY_PRIORITY else 99)
            shown = f"fields.{keys[0]}" if keys else where
            if shown != where and where.startswith(shown):
                shown = where
            rec, rep = contrast(lookup(expected, shown), lookup(actual, shown))
            others = f" (and {', '.join(keys[1:])})" if len(keys) > 1 else ""
            verb = "differ" if others else "differs"
            summary = (
                f"step {i + 1} ({expected['kind']}): {shown}{others} {verb}: recorded {rec}, "
                f"replayed {rep}"
            )
        return Divergence(
            step=i + 1,
            kind=expected["kind"],
            what="event",
            expected=expected,
            actual=actual,
            diff=diff_values(expected, actual),
            summary=summary,
        )

    def _progress(self) -> None:
        report = self.options.progress
        if report is None:
            return
        total = len(self.recorded)
        done = min(self.compared, total)
        if done == total or done - self._last_progress >= max(1, total // 200):
            self._last_progress = done
            report(done, total)

    def before_seam(self) -> Awaitable[None] | None:
        """Run before the current code gets anything from the recording: compare what it has
        recorded so far, and cancel the turn where the recording has a cancellation (a
        subagent's is its parent's: it waits for it, see ``_hold``)."""
        self._compare()
        pos = len(self.current())
        if pos < len(self.recorded) and self.recorded[pos].kind == "TurnCancelled":
            if self.parent is not None:
                return self.top._hold(self)
            if self.handle is not None:
                self.handle.loop.cancel_reason = str(self.recorded[pos].fields.get("reason"))
            raise asyncio.CancelledError
        return None

    def _at_cancel(self) -> bool:
        pos = len(self.current())
        return pos < len(self.recorded) and self.recorded[pos].kind == "TurnCancelled"

    def _compare(self) -> None:
        if self.top.deferred is not None:
            raise _Diverged(self.top.deferred)
        self.check()

    async def _hold(self, engine: ReplayEngine) -> NoReturn:
        """Where the recorded turn was cancelled while ``engine``'s call (or subagent) ran:
        wait until every subagent running again has come to such a point (or its end) and the
        session has recorded what it did before the cancellation, then cancel the turn as the
        user did. The turn's cancellation ends the wait (and cancels the children), so the
        events follow the recording whichever child got there first."""
        self.holding.add(engine)
        last, since = -1, time.monotonic()
        try:
            while not self._turn_cancelled:
                engine._compare()
                try:
                    self.check()
                except _Diverged as d:
                    self._defer(d.divergence)
                    raise
                pos = len(self.current())
                if pos != last:
                    last, since = pos, time.monotonic()
                # A child blocked elsewhere (behind another child's question) whose recording
                # has its cancellation next is where it was cancelled.
                if all(c in self.holding or c._at_cancel() for c in self.running_children):
                    if self._at_cancel():
                        self._turn_cancelled = True
                        if self.handle is not None:
                            self.handle.cancel(str(self.recorded[pos].fields.get("reason")))
                        break
                    if time.monotonic() - since > HOLD_STALL_S and pos < len(self.recorded):
                        # Nothing moves, and the recording expects something else first.
                        divergence = self._missing(pos)
                        self._defer(divergence)
                        raise _Diverged(divergence)
                await asyncio.sleep(HOLD_POLL_S)
            await asyncio.get_running_loop().create_future()  # until the turn's cancellation
            raise AssertionError("unreachable")  # pragma: no cover
        finally:
            self.holding.discard(engine)
            if not self.holding:
                self._turn_cancelled = False

    def _mismatch(self, m: ReplayMismatch) -> Divergence:
        step = len(self.current()) + 1
        expected = m.expected
        kind = m.kind
        if step <= len(self.recorded):
            kind = self.recorded[step - 1].kind
            if expected is None:
                expected = self.expected_event(step - 1)
        diff = m.diff if m.expected is not None else diff_values(expected, m.actual)
        return Divergence(step, kind, m.what, expected, m.actual, diff, f"step {step}: {m.summary}")

    # ------------------------------------------------------------------ seams

    async def execute(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        queue = self.runs.get(call.id)
        run = queue[0] if queue else None
        if run is not None and run.interrupted:
            self._compare()  # the cancellation is the call's own (below)
        else:
            waiting = self.before_seam()
            if waiting is not None:
                await waiting
        if run is None or run.completed is None:
            summary = (
                f"the current code runs {call.name} ({call.id}) and the recording has no "
                "result for this call"
            )
            raise ReplayMismatch(
                "tool", "ToolCallCompleted", None, {"run": call.name, "input": call.input}, summary
            )
        assert queue is not None
        queue.popleft()
        self.tool_calls += 1
        child = run.child_session() if self.live is not None else None
        # A subagent run again makes the user's recorded edits itself, when its steps saw them.
        for path, digest in [] if child else self.edits.get(f"call:{run.key}", []):
            self.scratch.put(path, digest)
        if self.live is not None and ctx.spawn is not None:
            ctx = dataclasses.replace(ctx, spawn=partial(self._spawn, call, run))
        if run.interrupted:
            await self._interrupted(call, run, ctx, child is not None)
        if self.live is not None:
            return await self.live_execute(call, ctx)
        for kind, fields in run.sink:
            if kind == "FileObserved":
                ctx.sink.observe_file(**fields)
            elif kind == "TaskStarted":
                # The child's result is served from the recording; the link to it stays. The
                # loop's sink (runner._RoutingSink) records it with the result.
                sink: Any = ctx.sink
                sink.start_task(**fields)
            else:
                ctx.sink.apply_edit(**fields)
        for kind, fields in [*run.sink, ("ToolCallCompleted", run.completed)]:
            for path, digest in disk.effects(kind, fields):
                self.scratch.put(path, digest)
        done = run.completed
        output = str(done["output"])
        if done.get("output_blob"):
            output = self.cassette.blob(done["output_blob"]).decode("utf-8", "surrogateescape")
        recorded_changes = list(done.get("files_changed") or [])
        effects = self.post_effects.get(call.id)
        if effects:
            # The recorded result holds what its post-tool hooks added; they are served again
            # (run_hook), so the tool's own part is what is served here.
            output, recorded_changes = tool_part(output, recorded_changes, effects)
        changes = tuple(
            FileChange(
                str(c["path"]),
                c.get("before"),
                c.get("after"),
                c.get("outcome"),
                c.get("proposed"),
                c.get("own"),
            )
            for c in recorded_changes
        )
        return ToolResult(output, bool(done.get("is_error")), changes)

    async def live_execute(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        assert self.live is not None
        # The cassette carries no secret: a variable's value comes from this environment by
        # name; any other redacted value runs as its marker, and the report says so.
        live_input, missing = resolve_env_markers(call.input, os.environ)
        if missing:
            self.secret_notes.append(
                f"step {self.tool_calls} ({call.name} {call.id}) needs {', '.join(missing)}:"
                " a secret the cassette does not carry; it ran with the marker in its place"
            )
        return await self.live.execute(dataclasses.replace(call, input=live_input), ctx)

    async def _interrupted(
        self, call: ToolCall, run: _ToolRun, ctx: ToolContext, again: bool
    ) -> NoReturn:
        """The recorded turn was cancelled while this call ran: its result is the loop's
        closing of it. A subagent runs again up to its own cancellation (or its end); any
        other call waits for the turn's cancellation without running."""
        if again:
            await self.live_execute(call, ctx)
        else:
            for kind, fields in run.sink:
                if kind == "TaskStarted":  # the link to the child stays with the closing
                    sink: Any = ctx.sink
                    sink.start_task(**fields)
        await self.top._hold(self)

    async def run_hook(self, spec: HookSpec, payload: dict[str, Any], ctx: ToolContext) -> Ran:
        """Verify mode: a hook's recorded run, served without running it (its file changes
        are the recording's, applied to the scratch workspace with the call's result)."""
        key = (str(payload.get("hook_event_name")), payload.get("tool_use_id"))
        queue = self.hook_runs.get(key)
        if not queue:
            summary = (
                f"the current code runs the hook {spec.identity} for {key[0]}"
                f"{f' ({key[1]})' if key[1] else ''}; the recording has no run of it here"
            )
            raise ReplayMismatch(
                "hook", "HookRan", None, {"hook": spec.identity, "event": key[0]}, summary
            )
        f = queue.popleft()
        effect = f.get("effect") or {}
        return Ran(
            f.get("exit_code"),
            str(f.get("output", "")),
            str(f.get("stderr", "")),
            int(f.get("duration_ms", 0)),
            tuple(effect.get("files_changed") or ()),
            str(effect.get("failed", "")) if f.get("exit_code") is None else "",
        )

    async def answer(self, question: up.PermissionRequired) -> PermissionAnswer:
        waiting = self.before_seam()
        if waiting is not None:
            await waiting
        queue = self.answers.get(question.tool_use_id)
        if not queue:
            summary = (
                f"the current code asks permission for {question.tool} {question.subject!r} "
                f"({question.reason}); the recording has no answer for this call"
            )
            raise ReplayMismatch(
                "permission",
                "PermissionDecided",
                None,
                {"ask": question.tool, "subject": question.subject, "reason": question.reason},
                summary,
            )
        a = queue.popleft()
        return PermissionAnswer(
            decision=str(a["decision"]),
            scope=str(a["scope"]),
            pattern=a.get("pattern"),
            reason=a.get("reason"),
            decided_by=str(a["decided_by"]),
        )

    # ------------------------------------------------------------------ subagents (live mode)

    async def _spawn(self, call: ToolCall, run: _ToolRun, definition: Any, args: Any) -> ToolResult:
        """A ``task`` call of the replayed session starts its subagent again: forked from the
        replayed parent under the recorded child's id, its model calls and answers served from
        the child's cassette by an engine of its own, its tools run in this scratch workspace."""
        sid = run.child_session()
        child = next((c for _call, c in self.cassette.children if c.session == sid), None)
        if child is None or self.handle is None:
            why = "started none" if sid is None else f"has no cassette of its subagent {sid}"
            m = ReplayMismatch(
                "tool",
                "ToolCallCompleted",
                None,
                {"task": call.id, "agent": getattr(definition, "name", "")},
                f"the current code starts a subagent for {call.name} ({call.id}); the "
                f"recording {why}",
            )
            # Raised inside the tool, it would become the call's error result: kept instead.
            self._defer(self._mismatch(m))
            raise m
        root = self.scratch.root
        options = dataclasses.replace(self.options, session_id=None, workspace=None, progress=None)
        engine = ReplayEngine(
            child, self.app, options, parent=self, task_call=call.id, initial=self._disk_at(run.at)
        )
        self.top.running_children.add(engine)
        engine.scratch = _Scratch(root, child.blob)
        engine.recorded_norm = engine.replayed_norm = engine._normalizer(child.workspace, root)
        for data in child.blobs.values():
            self.app.blobs.put(data)
        result: ToolResult = await ReplaySpawner(engine).run_child(
            self.handle.loop, call, definition, args
        )
        return result

    def _disk_at(self, index: int) -> dict[str, str | None]:
        """What the recording says the disk held just before event ``index``."""
        state = dict(self.initial)
        for e in self.recorded[:index]:
            for t in disk.touches(e.kind, e.fields):
                if disk.relative(t.path):
                    state[t.path] = t.after
        return state

    def _defer(self, divergence: Divergence) -> None:
        if self.top.deferred is None:
            self.top.deferred = divergence

    # The ChildReplay side (``replay.children``), on a subagent's engine.

    def child_seams(self, model: str) -> ChildSeams:
        matcher = RequestMatcher(self.app.blobs.get, self.recorded_norm, self.replayed_norm)
        self.provider = ReplayProvider(self.calls, matcher, model=model, before=self.before_seam)
        return ChildSeams(self.provider, self, self.answer, self.sid, self._attach)

    def _attach(self, loop: AgentLoop) -> None:
        self.child_loop = loop
        self.check()  # its Started

    def child_finished(self) -> None:
        self._leave()
        self.check()
        pos = len(self.current())
        if pos < len(self.recorded):
            if self._message_at(pos) is None and self.recorded[pos].kind not in _USER_SIDE:
                raise _Diverged(self._missing(pos))
            # The child session was continued by its user later: not part of the task.
            self.top.child_notes.append(
                f"subagent {self.sid} (task {self.task_call}): its events from step {pos + 1} "
                f"({self.recorded[pos].kind}) came after its task and were not replayed"
            )

    def child_cancelled(self) -> None:
        """Cancelled with its parent's turn: its events up to then must be the recorded ones."""
        try:
            self.child_finished()
        except _Diverged as d:
            self.child_failed(d)

    def child_failed(self, error: Exception) -> None:
        self._leave()
        if isinstance(error, _Diverged):
            found = error.divergence
        else:
            try:
                self.check()
                if isinstance(error, ReplayMismatch):
                    found = self._mismatch(error)
                else:
                    found = self._crash(error)
            except _Diverged as d:
                found = d.divergence
        if found is self.top.deferred:
            return  # a sibling's, seen here first
        where = f"subagent {self.sid} (task {self.task_call})"
        self._defer(dataclasses.replace(found, summary=f"in {where}: {found.summary}"))

    def _leave(self) -> None:
        self.top.running_children.discard(self)
        if self.parent is not None and not self._counted:
            self._counted = True
            self.top.child_notes += [f"subagent {self.sid}: {n}" for n in self.secret_notes]
            served = self.provider.served if hasattr(self, "provider") else 0
            self.top.child_counts[0] += served
            self.top.child_counts[1] += self.tool_calls

    # ------------------------------------------------------------------ running

    async def run(self) -> ReplayReport:
        started = time.perf_counter()
        divergence: Divergence | None = None
        repository = self._repository()
        own_dir = self.options.workspace is None
        base = Path(tempfile.mkdtemp(prefix="coder-es-replay-")) if own_dir else None
        base = (base or Path(self.options.workspace or ".")).resolve()
        root = base
        try:
            if repository is not None:
                # Shell commands ran git: the scratch workspace is a clone at the recorded state.
                state, source = repository
                root = git_state.restore(state, source, base, self.cassette.blob)
        except BaseException:
            if own_dir:
                shutil.rmtree(base, ignore_errors=True)
            raise
        self.scratch = _Scratch(root, self.cassette.blob)
        self.recorded_norm = self.replayed_norm = self._normalizer(self.cassette.workspace, root)
        try:
            try:
                self._setup(root)
                self.check()
                await self._drive()
                self.check()
            except _Diverged as d:
                divergence = d.divergence
            except ReplayMismatch as m:
                try:
                    self.check()
                    divergence = self._mismatch(m)
                except _Diverged as d:
                    divergence = d.divergence
            except Exception as e:  # the current code crashed: that is a finding too
                divergence = self._crash(e)
            if self.deferred is not None:
                # Found inside a subagent; what the parent did next follows from it.
                divergence = self.deferred
        finally:
            if self.handle is not None:
                with contextlib.suppress(Exception):
                    await self.handle.close()
            kept = None
            if own_dir and not self.options.keep_workspace:
                shutil.rmtree(base, ignore_errors=True)
            else:
                kept = str(root)
        return ReplayReport(
            cassette=self.cassette.name,
            mode=self.mode,
            session=str(self.sid),
            recorded_events=len(self.recorded),
            replayed_events=self.compared,
            model_calls=(self.provider.served if hasattr(self, "provider") else 0)
            + self.child_counts[0],
            tool_calls=self.tool_calls + self.child_counts[1],
            elapsed_s=time.perf_counter() - started,
            recorded_wall_s=self.cassette.recorded_wall_s,
            divergence=divergence,
            workspace=kept if self.options.keep_workspace or not own_dir else None,
            notes=tuple([*self.secret_notes, *self.child_notes]),
        )

    def _repository(self) -> tuple[git_state.GitState, Path] | None:
        """Live mode in a session recorded in a git repository: its state and where the commit
        is (raises ``GitStateError`` naming the repository and commit when nowhere)."""
        if self.mode != "live" or not self.recorded:
            return None
        state = git_state.GitState.from_settings(self.recorded[0].fields.get("settings") or {})
        if state is None:
            return None
        return state, git_state.find_source(state, self.options.repositories)

    def _crash(self, e: BaseException) -> Divergence:
        step = len(self.current()) + 1
        expected = self.expected_event(step - 1) if step <= len(self.recorded) else None
        where = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
        origin = f" ({Path(where.filename).name}:{where.lineno})" if where else ""
        actual = {"exception": type(e).__name__, "message": str(e)}
        return Divergence(
            step=step,
            kind=expected["kind"] if expected else "",
            what="error",
            expected=expected,
            actual=actual,
            diff=diff_values(expected, actual),
            summary=f"step {step}: the current code raised {type(e).__name__}{origin}: {e}",
        )

    def _setup(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        for path, digest in sorted(self.initial.items()):
            self.scratch.put(path, digest)
        for data in self.cassette.blobs.values():
            self.app.blobs.put(data)
        # A forked session's requests start with its ancestors' conversation, which the loop
        # reads from the store: they go in first, as recorded (not compared).
        for ancestor, events in self.cassette.ancestors:
            self.app.save(*(_domain_event(UUID(ancestor), e) for e in events))
        started = self.recorded[0].fields
        session = Session.start(
            id=self.sid,
            workspace=str(root),
            agent=started["agent"],
            provider=started["provider"],
            model=started["model"],
            title=started["title"],
            parent_session=started.get("parent_session"),
            parent_node=started.get("parent_node"),
            settings=dict(started.get("settings") or {}),
            sealing=self.app.sealing,
        )
        self.app.save(session)
        blobs = self.app.blobs
        matcher = RequestMatcher(blobs.get, self.recorded_norm, self.replayed_norm)
        self.provider = ReplayProvider(
            self.calls, matcher, model=str(started["model"]), before=self.before_seam
        )
        self.service = AgentService(
            self.app,
            root,
            provider_factory=lambda _name, _model: self.provider,
            tools=self.tools,
            executor=self,
            hook_runner=self.run_hook if self.mode == "verify" else None,
            clock=_NoWaitClock(self),
            config=self.options.config,
            mcp_factory=self._mcp_source,
        )

    def _mcp_source(self, _servers: object) -> McpSource:
        if self.mode == "live":
            from coder_es.mcp.manager import McpManager

            return McpManager(self.options.mcp_servers)
        return _RecordedMcp(self)

    async def _open(self) -> SessionHandle:
        if self.handle is None:
            options = SessionOptions(max_steps=self.max_steps)
            self.handle = await self.service.open_session(str(self.sid), options)
        return self.handle

    async def _close_handle(self) -> None:
        if self.handle is not None:
            await self.handle.close()
            self.handle = None

    async def _drive(self) -> None:
        while True:
            pos = len(self.current())
            if pos >= len(self.recorded):
                return
            event = self.recorded[pos]
            message = self._message_at(pos)
            if message is not None:
                await self._user_message(message)
            elif event.kind in ("WorkspaceRestored", "HeadMoved"):
                await self._close_handle()
                self._move(pos)
            elif event.kind == "NodeLabelled":
                await self._close_handle()
                f = event.fields
                Branching(self.app, self.scratch.root).label(
                    self.sid, str(f["node"]), f["name"], check_name=False
                )
            elif event.kind == "HookRan" and event.fields.get("hook_event") == "SessionEnd":
                handle = await self._open()
                await handle.end(str((event.fields.get("input") or {}).get("reason", "other")))
            elif event.kind == "HooksChanged":
                handle = await self._open()
                with handle.leased("hooks change"):
                    handle.loop.change_hooks(list(event.fields.get("hooks") or []))
            elif event.kind == "PermissionsChanged":
                # A user-side change (a resume with new rules, a config reload) between turns.
                f = event.fields
                handle = await self._open()
                handle.update_permissions(
                    rules_from_records(f.get("rules") or []), str(f.get("default", "ask"))
                )
            elif event.kind == "SettingsChanged":
                # Another agent preset or model between turns (an editor's mode, a resume's
                # --agent/--model): recorded again, the loop offers that preset's tools and
                # decides by its rules from here, as the recorded session did. The model's
                # answers still come from the recording.
                f = event.fields
                handle = await self._open()
                handle.change_settings(
                    agent=str(f["agent"]),
                    provider=str(f["provider"]),
                    model=str(f["model"]),
                    context_budget=int(f["context_budget"]),
                )
            elif (
                event.kind == "DeferredAnswered"
                and (event.fields.get("by") or {}).get("client") != "schedule"
            ):
                # A parked question answered from another process (``approve`` / ``deny``),
                # through the same code, with what the recorded decision says.
                await self._close_handle()
                self._answer_parked(pos)
            elif event.kind in ("Archived", "Unarchived"):
                # Whether the lists show it: nothing the agent decides depends on it.
                f = event.fields
                self.app.archive_session(
                    self.sid, by=str(f["by"]), archived=event.kind == "Archived"
                )
            elif event.kind == "ContextCompacted":
                await self._close_handle()
                f = event.fields
                self.app.update(
                    self.sid,
                    partial(
                        Session.compact_context,
                        covers=list(f["covers"]),
                        summary=str(f["summary"]),
                        produced_by=str(f["produced_by"]),
                    ),
                )
            else:
                # Agent-side events where no turn runs: the recorded session resumed one.
                handle = await self._open()
                await self._consume(handle.resume(answerer=self.answer))
            self.check()
            if len(self.current()) == pos:
                raise _Diverged(self._missing(pos))

    def _answer_parked(self, pos: int) -> None:
        asked = self.recorded[pos].fields
        after = self.recorded[pos + 1] if pos + 1 < len(self.recorded) else None
        if after is None or after.kind != "PermissionDecided":
            msg = "a DeferredAnswered not followed by its PermissionDecided cannot be replayed"
            raise ReplayMismatch("error", "DeferredAnswered", None, None, msg)
        decided = after.fields
        decision = str(asked["decision"])
        answer_parked(
            self.app,
            str(self.sid),
            [str(asked["tool_use_id"])],
            decision=decision,
            by=dict(asked.get("by") or {}),
            always=decided.get("scope") == "always",
            message=decided.get("reason") if decision == "deny" else None,
        )

    def _missing(self, pos: int) -> Divergence:
        event = self.recorded[pos]
        expected = self.expected_event(pos)
        return Divergence(
            step=pos + 1,
            kind=event.kind,
            what="missing",
            expected=expected,
            actual=None,
            diff=diff_values(expected, None),
            summary=(
                f"step {pos + 1}: the recording continues with {event.kind}; the "
                "current code records nothing more here"
            ),
        )

    def _message_at(self, pos: int) -> RecordedEvent | None:
        """The user message that starts here (after the closing of an abandoned turn's calls,
        which the loop records itself before the message)."""
        i = pos
        while i < len(self.recorded):
            e = self.recorded[i]
            if e.kind == "UserMessageAdded":
                return e
            if e.kind == "HookRan" and e.fields.get("hook_event") in _PROMPT_HOOKS:
                # The hooks of a message run again (or are served) when it is sent; a prompt
                # they blocked has no message: it is sent as the hook got it.
                if e.fields.get("hook_event") == "UserPromptSubmit" and (
                    e.fields.get("effect") or {}
                ).get("blocked"):
                    nxt = self.recorded[i + 1] if i + 1 < len(self.recorded) else None
                    prompt = str((e.fields.get("input") or {}).get("prompt", ""))
                    same = (
                        nxt is not None
                        and nxt.kind == "HookRan"
                        and nxt.fields.get("hook_event") == "UserPromptSubmit"
                        and (nxt.fields.get("input") or {}).get("prompt") == prompt
                    )
                    if not same:
                        content = [{"type": "text", "text": prompt}]
                        return dataclasses.replace(
                            e, kind="UserMessageAdded", fields={"content": content}
                        )
                i += 1
                continue
            if e.kind == "ToolCallCompleted" and e.fields.get("output") == ABANDONED:
                i += 1
                continue
            return None
        return None

    async def _user_message(self, event: RecordedEvent) -> None:
        content = event.fields["content"]
        added = self._hook_context_blocks(event)
        if added and isinstance(content, list) and len(content) == added + 1:
            content = content[:1]  # the user's text; the hooks add the rest again
        text = None
        if (
            isinstance(content, list)
            and len(content) == 1
            and content[0].get("type") == "text"
            and str(content[0].get("text", "")).strip()
        ):
            text = str(content[0]["text"])
        if text is not None:
            handle = await self._open()
            await self._consume(handle.send(text, answerer=self.answer))
            return
        # Content a plain message cannot carry: add it as recorded, then run the turn.
        await self._close_handle()
        self.app.update(self.sid, lambda s: s.add_user_message(list(content)))
        handle = await self._open()
        await self._consume(handle.resume(answerer=self.answer))

    def _hook_context_blocks(self, event: RecordedEvent) -> int:
        """How many text blocks the prompt's hooks added after the user's text (they add them
        again when the message is sent)."""
        at = next((i for i, e in enumerate(self.recorded) if e is event), None)
        count = 0
        i = (at or 0) - 1
        while i >= 0 and self.recorded[i].kind == "HookRan":
            f = self.recorded[i].fields
            if f.get("hook_event") not in _PROMPT_HOOKS:
                break
            if (f.get("effect") or {}).get("context"):
                count += 1
            i -= 1
        return count

    async def _consume(self, updates: Any) -> None:
        async for _update in updates:
            pass

    def _move(self, pos: int) -> None:
        event = self.recorded[pos]
        restore = event if event.kind == "WorkspaceRestored" else None
        head = event if event.kind == "HeadMoved" else None
        if restore is not None and pos + 1 < len(self.recorded):
            after = self.recorded[pos + 1]
            if after.kind == "HeadMoved" and after.fields.get("node") == restore.fields["node"]:
                head = after
        if restore is not None:
            for path, digest in self.edits.get(f"restore:{restore.version}", []):
                self.scratch.put(path, digest)
        target = (restore or head or event).fields.get("node")
        if target is None:
            msg = "a move to before the first message cannot be replayed"
            raise ReplayMismatch("error", event.kind, None, None, msg)
        branching = Branching(self.app, self.scratch.root)
        target = str(target)
        if head is not None:
            reason = head.fields.get("reason")
            if reason == "checkout":
                branching.checkout(self.sid, target)
            elif reason == "fork":
                branching.fork(self.sid, target)
            else:
                files = restore is not None or not branching.files(self.sid).restore_plan(target)
                branching.rewind(self.sid, target, conversation=True, files=files)
        else:
            tree = branching.tree(self.sid)
            head_now = self.app.get_session(self.sid).head
            if head_now is not None and tree.is_ancestor(target, head_now):
                branching.rewind(self.sid, target, conversation=False, files=True)
            else:
                branching.fork(self.sid, target, new_session=True)


class _RecordedMcp:
    """Verify mode's MCP servers: the tools the recording listed, where it listed them (the
    results come from the recording through ``ReplayEngine.execute``)."""

    def __init__(self, engine: ReplayEngine) -> None:
        self.engine = engine

    async def catalog(self, *, turn_start: bool = False) -> list[dict[str, Any]] | None:
        recorded = self.engine.recorded
        pos = len(self.engine.current())
        if pos < len(recorded) and recorded[pos].kind == "McpToolsListed":
            return [dict(s) for s in recorded[pos].fields["servers"]]
        return None

    async def call(
        self, server: str, tool: str, arguments: dict[str, Any], ctx: ToolContext
    ) -> ToolResult:
        return ToolResult(f"MCP server {server!r} is not called in a verify replay", True)

    async def aclose(self) -> None:
        return None


class _NoWaitClock:
    """Durations are normalized away; a replay does not wait out recorded retry delays. The
    wall time (what a scheduled call's window is checked against) is the recorded time of the
    event the replay is about to record: the replay decides as the recording did."""

    def __init__(self, engine: ReplayEngine) -> None:
        self.engine = engine

    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> datetime:
        """The time the recording's loop read where it decided a scheduled call (recorded in
        ``CallScheduled.at`` and the schedule's ``DeferredAnswered.by``; inside the window of
        a call it ran at once), else the recorded time of the next event."""
        recorded = self.engine.recorded
        if not recorded:
            return datetime.now(UTC)
        pos = min(len(self.engine.current()), len(recorded) - 1)
        e, after = recorded[pos], recorded[pos + 1 : pos + 2]
        text = e.timestamp
        if e.kind == "PermissionDeferred" and after and after[0].kind == "CallScheduled":
            text = str(after[0].fields["at"])
        elif e.kind == "DeferredAnswered" and (e.fields.get("by") or {}).get("at"):
            text = str(e.fields["by"]["at"])
        when = _aware(datetime.fromisoformat(text))
        if e.kind == "PermissionDecided" and e.fields.get("decided_by") == "schedule":
            window = window_of(e.fields.get("matched_rule"))
            if window is not None and not window.contains(when):
                when = window.next_opening(when)  # a time it was open, as the recording saw
        return when

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(0)


def _aware(when: datetime) -> datetime:
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


@dataclass(frozen=True)
class _Keyed:
    version: int
    kind: str
    fields: dict[str, Any]


def _domain_event(originator: UUID, e: RecordedEvent) -> Any:
    """The domain event a recorded one was, built the way eventsourcing's mapper builds a
    stored one (its fields are the event's state; no command runs again)."""
    cls = getattr(Session, e.kind, None)
    if not isinstance(cls, type):
        raise CassetteError(f"the ancestor event {e.kind} is not an event of this code")
    event: Any = object.__new__(cls)
    state = {
        "originator_id": originator,
        "originator_version": e.version,
        "timestamp": datetime.fromisoformat(e.timestamp),
        **e.fields,
    }
    object.__setattr__(event, "__dict__", state)
    return event


def _with_call_keys(events: tuple[RecordedEvent, ...]) -> list[_Keyed]:
    """Events whose ``tool_use_id`` carries the call's occurrence (ids may repeat in a
    session: a scripted provider numbers its calls from zero in every process)."""
    occurrences: dict[str, int] = {}
    out = []
    for e in events:
        f = e.fields
        cid = f.get("tool_use_id")
        if e.kind == "ToolCallRequested":
            occurrences[str(cid)] = occurrences.get(str(cid), 0) + 1
        if isinstance(cid, str) and e.kind in ("FileObserved", "EditApplied", "ToolCallCompleted"):
            f = {**f, "tool_use_id": f"{cid}#{occurrences.get(cid, 1)}"}
        out.append(_Keyed(e.version, e.kind, f))
    return out


# ---------------------------------------------------------------------- entry points


def replay_cassette(
    cassette: Cassette,
    options: ReplayOptions | None = None,
    *,
    store: StoreConfig | None = None,
) -> ReplayReport:
    """Replay ``cassette`` with the current code; ``store`` defaults to a fresh in-memory one."""
    return asyncio.run(areplay_cassette(cassette, options, store=store))


async def areplay_cassette(
    cassette: Cassette,
    options: ReplayOptions | None = None,
    *,
    store: StoreConfig | None = None,
) -> ReplayReport:
    options = options or ReplayOptions()
    from replay.harness import areplay_harness, is_harness_cassette

    if is_harness_cassette(cassette):
        # Another agent CLI ran it: its turns are replayed by that CLI (replay.harness).
        return await areplay_harness(
            cassette,
            options.mode,
            workspace=options.workspace,
            keep_workspace=options.keep_workspace,
            network=options.network,
            harnesses=options.harnesses,
        )
    app = ReplayApp(store)
    try:
        engine = ReplayEngine(cassette, app, options)
        report = await engine.run()
    finally:
        app.close()
    if report.ok and options.mode == "verify":
        # Each subagent is a session of its own: replayed from its cassette (its ancestors
        # carry the parent's conversation up to the fork); the first divergence names it.
        child_options = dataclasses.replace(options, session_id=None, workspace=None)
        for call, child in cassette.children:
            found = await areplay_cassette(child, child_options)
            if found.divergence is not None:
                d = found.divergence
                where = f"subagent {child.session} (task {call})"
                divergence = dataclasses.replace(d, summary=f"in {where}: {d.summary}")
                return dataclasses.replace(report, divergence=divergence)
    return report
