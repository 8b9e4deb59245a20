"""The effect runner: carries out the decider's actions and records every result as an event.

``AgentLoop`` owns one session while a turn runs. It asks ``decide`` for the next action, does
it (call the model, ask for a permission, run tools), records what came back through the
``Session`` aggregate, applies the new events to its ``LoopState`` and asks again. Every
non-deterministic input (model output, permission answers, tool results, retries, errors,
cancellation) is recorded as an event before the next decision, so the decisions are a pure
function of the events.

Seams (all injectable): the ``Provider`` (model), the ``ToolExecutor`` (tools), the
``PermissionAnswerer`` (a user, a client, or a recording), the ``Clock`` and the update sink.

Persistence (one commit per step in the common case): pending events are saved together just
before a side effect that must not be repeated blindly (running tools, asking someone) and at the
end of a turn; the user's message, a permission answer and the result of a tool that may write
are saved at once. What a crash can lose is therefore only what is safe to redo: a model
response not yet followed by any tool run (the model is asked again), the decider's pure
consequences (re-derived), and results of read-only tools (run again).

Cancellation (``asyncio`` task cancellation, e.g. Ctrl-C): running tools are cancelled (bash
kills its process group), ``TurnCancelled`` is recorded with the open calls, and each open call
gets an "interrupted" error result so the conversation stays valid for the next message.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, Protocol, TypeVar
from uuid import UUID

from eventsourcing.persistence import IntegrityError

from coder_es.agent import decider as d
from coder_es.agent import updates as up
from coder_es.agent.origin import origin
from coder_es.agent.request import RequestRecorder, RequestSettings
from coder_es.agent.state import LoopState
from coder_es.application import CoderApp
from coder_es.domain.session import Session
from coder_es.errors import CoderESError, UsageError
from coder_es.hooks.answer import Ran
from coder_es.hooks.command import run_hook
from coder_es.hooks.pipeline import EventInput, Outcome, model_note, notes_of, run_event
from coder_es.hooks.spec import HookSpec, hooks_for
from coder_es.mcp.tool import McpSource, with_mcp_tools
from coder_es.permissions.policy import Evaluation, PermissionAnswer
from coder_es.permissions.schedule import window_of
from coder_es.providers import types as pt
from coder_es.providers.base import Provider, ResponseAssembler
from coder_es.providers.errors import ContextTooLongError, ProviderError
from coder_es.providers.images import ImageInput, check_images, image_block, with_image_data
from coder_es.sandbox import SandboxSettings
from coder_es.sandbox import recover as recover_transactions
from coder_es.tools.base import ToolCall, ToolContext, ToolResult
from coder_es.tools.output import DEFAULT_LIMIT, cap_output
from coder_es.tools.registry import ToolExecutor
from coder_es.workspace.workspace import Workspace
from projections.context import ContextBuilder, forked_from, plan_compaction, stable_prefix
from projections.context.builder import DEFAULT_BUDGET

T = TypeVar("T")


class SessionConflictError(CoderESError):
    """Another process wrote to the session while this loop was running it."""


class _StreamFailure(Exception):
    """A provider error, and whether model output had already arrived when it happened."""

    def __init__(self, error: ProviderError, delivered: bool) -> None:
        super().__init__(str(error))
        self.error = error
        self.delivered = delivered


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def now(self) -> datetime:
        """The wall time, aware (UTC): when a scheduled call may run."""
        ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> datetime:
        return datetime.now(UTC)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


PermissionAnswerer = Callable[[up.PermissionRequired], Awaitable[PermissionAnswer]]
Emit = Callable[[up.Update], None]
HookRunner = Callable[[HookSpec, dict[str, Any], ToolContext], Awaitable[Ran]]
# Claude Code ends a turn after this many Stop-hook blocks in a row (each one continues it).
MAX_STOP_CONTINUES = 8


@dataclass(frozen=True)
class LoopConfig:
    max_steps: int = 50
    max_tokens: int = 8192
    output_limit: int = DEFAULT_LIMIT
    # Whole-request retries for a stream that broke after content arrived (the provider
    # already retries failures that happen before any content).
    model_retries: int = 1
    retry_delay_s: float = 1.0
    # Input tokens a request may hold: the model's context window minus max_tokens.
    context_budget: int = DEFAULT_BUDGET


@dataclass(frozen=True)
class TurnOutcome:
    reason: str  # a stop reason, "max_steps", "cancelled", "error", "idle", "waiting"
    steps: int
    head: str | None
    error: str | None = None


class _RoutingSink:
    """File events from tools (and a ``task``'s link to its child), kept per call until the
    call's result is recorded: the log holds them in the model's call order whatever order the
    calls of a batch ran in."""

    def __init__(self) -> None:
        self.buffers: dict[str | None, list[tuple[str, dict[str, Any]]]] = {}

    def observe_file(self, **kwargs: Any) -> None:
        self.buffers.setdefault(kwargs.get("tool_use_id"), []).append(("observe_file", kwargs))

    def apply_edit(self, **kwargs: Any) -> None:
        self.buffers.setdefault(kwargs.get("tool_use_id"), []).append(("apply_edit", kwargs))

    def start_task(self, **kwargs: Any) -> None:
        self.buffers.setdefault(kwargs.get("tool_use_id"), []).append(("start_task", kwargs))

    def take(self, tool_use_id: str) -> list[tuple[str, dict[str, Any]]]:
        return self.buffers.pop(tool_use_id, [])


@dataclass
class _Ran:
    call: ToolCall
    result: ToolResult
    duration_ms: int


class Spawner(Protocol):
    """Starts a subagent for a ``task`` call of ``parent`` and runs it to its end."""

    async def run_child(
        self, parent: AgentLoop, call: ToolCall, definition: Any, args: Any
    ) -> ToolResult: ...


@dataclass
class LoopDeps:
    """The seams of one loop."""

    provider: Provider
    executor: ToolExecutor
    answerer: PermissionAnswerer
    decision: d.DecisionContext
    clock: Clock = field(default_factory=SystemClock)
    sandbox: SandboxSettings | None = None
    """How shell commands run; None: from the environment (``CODER_ES_SANDBOX``)."""
    mcp: McpSource | None = None
    """The session's MCP servers (None: it has none)."""
    spawner: Spawner | None = None
    """Runs ``task`` calls (subagents); None: they fail with a message."""
    hook_runner: HookRunner | None = None
    """Runs one hook (``coder_es.hooks``): None runs its command in the session's sandbox (or
    its plugin); replay in verify mode serves the recorded runs instead."""


class AgentLoop:
    def __init__(
        self,
        app: CoderApp,
        session_id: UUID | str,
        deps: LoopDeps,
        *,
        emit: Emit | None = None,
        config: LoopConfig | None = None,
    ) -> None:
        self.app = app
        self.deps = deps
        self.config = config or LoopConfig()
        self.emit: Emit = emit or (lambda _u: None)
        self.session: Session = app.get_session(session_id)
        self.state = LoopState()
        self._turn_start = False
        self._builder: ContextBuilder | None = None
        self._sent: list[Any] = []  # the last request's messages (for manifest deltas)
        self._settings: RequestSettings | None = None
        self.hook_specs: tuple[HookSpec, ...] = ()
        # Files hooks changed around a call, attributed to them in the call's result.
        self._hook_files: dict[str, list[dict[str, Any]]] = {}
        # The loop works on what was really said and done: stored events hold markers where a
        # secret was, and the loop resolves them (coder_es.sealing), so a resumed or redacted
        # session behaves exactly as an unredacted one would.
        events = app.unsealed_events(self.session.id)
        # A forked session's requests start with the conversation it was forked from.
        self.context = forked_from(
            events[0] if events else None, lambda sid, lte: app.unsealed_events(UUID(sid), lte=lte)
        )
        for event in events:
            self._apply(event)
        # Blobs holding a secret are sealed in this session's scope (forget shreds them).
        self.blobs = app.blobs.for_session(self.session.id)
        self.recorder = RequestRecorder(self.blobs)
        self.sink = _RoutingSink()
        self.workspace = Workspace(
            self.state.workspace, self.blobs, self.sink, views=Workspace.views_from_events(events)
        )
        self.root = Path(self.state.workspace)
        self.tool_cache: dict[str, Any] = {}
        self._running: set[asyncio.Task[Any]] = set()
        self.cancel_reason = "cancelled by the user"
        # Who runs this loop, as a parked turn records it (``TurnParked.by``).
        self.client = "coder-es"
        # Questions of this loop's subagents, running side by side, are asked one at a time.
        self.questions = asyncio.Lock()
        # Shell transactions a crashed process left: finished or dropped before anything runs.
        with contextlib.suppress(OSError):
            recover_transactions(self.workspace.root, app.blobs)

    # ------------------------------------------------------------------ events

    def _apply(self, event: Any) -> None:
        self.state.apply(event)
        self.context.apply(event)
        if isinstance(event, Session.PermissionsChanged):
            self._follow_permissions()
        elif isinstance(event, Session.McpToolsListed):
            self._follow_mcp_tools()
        elif isinstance(event, Session.SettingsChanged):
            self._follow_settings()
        elif isinstance(event, Session.Started | Session.HooksChanged):
            self._follow_hooks()

    def _follow_permissions(self) -> None:
        # Decisions after the event use its rules, whether it was just recorded or loaded.
        rules, default = self.state.permissions_in_force()
        before = self.deps.decision.offered()
        self.deps.decision = self.deps.decision.with_permissions(rules, default)
        if self.deps.decision.offered() != before:
            # A rule can offer a tool the preset does not (or stop offering it).
            self._settings = None
            self._builder = None

    def _follow_settings(self) -> None:
        # From here the preset's tools and rules decide, and requests fit the new model's
        # budget: a replay switches at the same event as the recorded session did.
        st = self.state
        self.deps.decision = self.deps.decision.with_agent(st.agent, st.settings)
        if st.context_budget is not None:
            self.config = replace(self.config, context_budget=st.context_budget)
        self._settings = None
        self._builder = None

    def _follow_hooks(self) -> None:
        # The hooks recorded in force: a replay runs (or serves) the ones the session ran with.
        self.hook_specs = tuple(HookSpec.from_record(r) for r in self.state.hooks_in_force())

    async def end_session(self, reason: str = "other") -> None:
        """SessionEnd hooks, when the session's process is done with it (``run`` and ``chat``
        at their end); recorded like every hook run."""
        if self.hook_specs and hooks_for(self.hook_specs, "SessionEnd"):
            await self._run_hooks("SessionEnd", extra={"reason": reason})
            self.flush()

    def change_hooks(self, hooks: list[dict[str, Any]]) -> None:
        """Record other hooks for this session (between turns) and run by them."""
        self._trigger(partial(Session.change_hooks, hooks=hooks))
        self.flush()

    def _follow_mcp_tools(self) -> None:
        # The tools offered follow the recorded catalog, so a replay offers what was offered.
        tools = with_mcp_tools(self.deps.decision.tools, self.state.mcp_servers, self.deps.mcp)
        self.deps.decision = replace(self.deps.decision, tools=tools)
        self._settings = None
        self._builder = None

    async def _sync_mcp(self) -> None:
        """Before a model call: record the MCP servers' tools if they changed (a server started,
        failed, or sent tools/list_changed)."""
        source = self.deps.mcp
        if source is None:
            return
        turn_start, self._turn_start = self._turn_start, False
        servers = await source.catalog(turn_start=turn_start)
        if servers is None or servers == self.state.mcp_servers:
            return
        known = {s.get("name"): s.get("status") for s in self.state.mcp_servers}
        self._trigger(partial(Session.list_mcp_tools, servers=servers))
        for s in servers:
            if s.get("status") == "failed" and known.get(s.get("name")) != "failed":
                self.emit(up.Error("McpServerFailed", str(s.get("error")), False))

    def change_settings(
        self, *, agent: str, provider: str, model: str, context_budget: int
    ) -> None:
        """Record another agent preset, provider or model for this session (between turns)
        and run by it from now on."""
        self._trigger(
            partial(
                Session.change_settings,
                agent=agent,
                provider=provider,
                model=model,
                context_budget=context_budget,
            )
        )
        self.flush()

    def change_permissions(self, rules: list[dict[str, Any]], default: str) -> None:
        """Record new user rules for this session (between turns) and decide by them."""
        self._trigger(partial(Session.change_permissions, rules=rules, default=default))
        self.flush()

    def _trigger(self, command: Callable[[Session], T]) -> T:
        before = len(self.session.pending_events)
        result = command(self.session)
        for event in self.session.pending_events[before:]:
            self._apply(self.app.sealing.unseal_event(event))
        return result

    def flush(self) -> None:
        if not self.session.pending_events:
            return
        try:
            self.app.save(self.session)
        except IntegrityError as e:
            msg = (
                f"session {self.session.id} was changed by another process while this run was "
                f"going; the last {len(self.session.pending_events)} event(s) were not saved. "
                "Resume it with --session to continue from what was saved."
            )
            raise SessionConflictError(msg) from e

    @property
    def session_id(self) -> str:
        return str(self.session.id)

    # ------------------------------------------------------------------ turns

    async def send(self, text: str, images: Sequence[ImageInput] = ()) -> TurnOutcome:
        """Add a user message (its text, then any images) and run the turn it starts.

        Each image is its bytes, or ``(media_type, bytes)`` as ACP clients give it; the media
        type is always sniffed from the bytes (a declared one is not trusted). A file that is
        not a PNG/JPEG/GIF/WebP image or is too large raises ``ImageError`` before anything is
        recorded."""
        blocks = [
            image_block(kind, self.blobs.put(data), len(data))
            for kind, data in check_images(images)
        ]
        return await self._guarded(self._send(text, blocks))

    async def resume(self) -> TurnOutcome:
        """Continue whatever the session was doing when its last run stopped."""
        return await self._guarded(self._resume())

    async def _send(self, text: str, images: list[dict[str, Any]]) -> TurnOutcome:
        refused = d.parked_in_the_way(self.state, self.session_id)
        if refused is not None:
            raise UsageError(refused)  # before anything is recorded
        leftover = d.abandon(self.state)
        if leftover is not None:
            self._close(leftover)
        content = [{"type": "text", "text": text}] if text or not images else []
        added: list[dict[str, Any]] = []
        if self.hook_specs:
            if not self.state.nodes:
                start = await self._run_hooks("SessionStart", extra={"source": "startup"})
                added += [{"type": "text", "text": t} for t in start.context]
            hooked = await self._run_hooks("UserPromptSubmit", extra={"prompt": text})
            if hooked.blocked or hooked.stop_reason is not None:
                # Claude Code's semantics: the prompt is erased (never reaches the model); the
                # reason is for the user. What the hooks did is recorded.
                self.flush()
                why = hooked.block_reason or hooked.stop_reason or "blocked by a hook"
                self.emit(up.Error("PromptBlocked", why, False))
                self.emit(up.TurnEnded("blocked", 0, self.state.head))
                return TurnOutcome("blocked", 0, self.state.head, why)
            added += [{"type": "text", "text": t} for t in hooked.context]
        node = self._trigger(lambda s: s.add_user_message([*content, *added, *images]))
        self._turn_start = True
        self.flush()
        self.emit(up.UserMessage(node, text))
        return await self._drive()

    async def _resume(self) -> TurnOutcome:
        info = self.state.head_info()
        if info is not None and info.cancelled:
            # Asking to resume a cancelled turn is the user's decision to continue it.
            self._trigger(lambda s: s.resume_turn())
            self.flush()
        self._turn_start = True
        recovery = d.recover(self.state, self.deps.decision)
        if recovery is not None:
            self._close(recovery)
            self.flush()
        self._run_due_calls()
        if self.state.parked is not None and any(
            c.deferred and c.decision is not None for c in self.state.open_calls()
        ):
            # A parked turn whose questions got answers: taken up again, the same turn.
            self._trigger(lambda s: s.resume_turn())
            self.flush()
        return await self._drive()

    async def _guarded(self, turn: Awaitable[TurnOutcome]) -> TurnOutcome:
        try:
            return await turn
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            return await self._on_cancel()

    async def _drive(self) -> TurnOutcome:
        while True:
            action = d.decide(self.state, self.deps.decision)
            if (
                self.hook_specs
                and isinstance(action, d.DecideByRule | d.AskPermission)
                and await self._pre_tool_hooks(action.call)
            ):
                continue  # decided again with what the hooks answered (and rewrote)
            if isinstance(action, d.Done):
                if self.hook_specs and await self._stop_hooks(action.reason):
                    continue  # a Stop hook kept the turn going
                return self._finish(action.reason)
            if isinstance(action, d.CallModel):
                await self._sync_mcp()
                error = await self._call_model(action.step)
                if error is not None:
                    return self._finish("error", error)
            elif isinstance(action, d.RecordToolCalls):
                for call in action.calls:
                    self._trigger(
                        partial(
                            Session.request_tool_call,
                            node=action.node,
                            tool_use_id=call.id,
                            name=call.name,
                            input=call.input,
                        )
                    )
            elif isinstance(action, d.DecideByRule):
                self._decide_by_rule(action.call, action.evaluation, action.decided_by)
            elif isinstance(action, d.DeferPermission):
                self._defer(action.call, action.evaluation, action.source)
            elif isinstance(action, d.Park):
                return self._park(action)
            elif isinstance(action, d.AskPermission):
                await self._ask(action)
            elif isinstance(action, d.CloseCalls):
                self._close(action)
            elif isinstance(action, d.RunTools):
                await self._run_tools(action)
            else:  # pragma: no cover - the Action union is closed
                msg = f"unknown action {action!r}"
                raise AssertionError(msg)

    def _finish(self, reason: str, error: str | None = None) -> TurnOutcome:
        info = self.state.head_info()
        steps = info.steps if info is not None else 0
        if reason == "max_steps" and self.state.step_limit_at != self.state.head:
            self._trigger(partial(Session.stop_at_step_limit, steps=steps))
        self.flush()
        self.emit(up.TurnEnded(reason, steps, self.state.head))
        return TurnOutcome(reason, steps, self.state.head, error)

    async def _on_cancel(self) -> TurnOutcome:
        for task in list(self._running):
            task.cancel()
        if self._running:
            # Let the tools clean up (bash kills its process group) before recording.
            await asyncio.gather(*self._running, return_exceptions=True)
        self._running.clear()
        open_ids = [c.id for c in self.state.open_calls()]
        reason = self.cancel_reason
        self._trigger(lambda s: s.cancel(reason=reason, tool_use_ids=open_ids))
        action = d.decide(self.state, self.deps.decision)
        if isinstance(action, d.CloseCalls):
            self._close(action)
        self.flush()
        self.emit(up.TurnCancelled(reason, tuple(open_ids)))
        return self._finish("cancelled")

    # ------------------------------------------------------------------ hooks

    def _hook_ctx(self, call: ToolCall | None) -> ToolContext:
        """A hook runs where the session's bash runs (``_context``); its file changes are the
        call's (or, without a call, the session's own), in the agent's views at once."""
        if call is not None:
            ctx = self._context(call)
        else:
            ctx = ToolContext(
                root=self.workspace.root,
                tool_use_id="",
                sink=self.sink,
                workspace=self.workspace,
                cache=self.tool_cache,
                sandbox=self._sandbox(),
                tools=self.deps.decision.tools,
            )
        return dataclasses.replace(ctx, progress=lambda _text: None, spawn=None, terminal=None)

    async def _run_hooks(
        self,
        event: str,
        call: ToolCall | None = None,
        extra: dict[str, Any] | None = None,
    ) -> Outcome:
        """Run the hooks of ``event`` (for ``call``) in order; record each run before anything
        acts on it."""
        runner = self.deps.hook_runner or run_hook
        ctx = self._hook_ctx(call)

        async def run(spec: HookSpec, payload: dict[str, Any]) -> Ran:
            return await runner(spec, payload, ctx)

        ev = EventInput(
            event,
            self.session_id,
            self.root,
            tool=call.name if call is not None else None,
            tool_input=dict(call.input) if call is not None else None,
            tool_use_id=call.id if call is not None else None,
            extra=extra or {},
        )
        out = await run_event(self.hook_specs, ev, run)
        for record in out.records:
            self._trigger(partial(Session.record_hook_run, **record))
            self.emit(
                up.HookRan(
                    event,
                    record["hook"],
                    record["tool_use_id"],
                    record["exit_code"],
                    record["duration_ms"],
                    dict(record["effect"]),
                )
            )
        if call is not None and out.files_changed:
            self._hook_files.setdefault(call.id, []).extend(out.files_changed)
        return out

    async def _pre_tool_hooks(self, call: ToolCall) -> bool:
        """PreToolUse hooks for a call about to be decided; True when they ran (the decision
        is then made again with what they answered)."""
        state = self.state.calls.get(call.id)
        if state is None or state.pre_hooked:
            return False
        if not hooks_for(self.hook_specs, "PreToolUse", call.name):
            return False
        out = await self._run_hooks("PreToolUse", call)
        state.pre_hooked = True  # even when no hook answered (the records say they ran)
        if out.files_changed:
            self.flush()  # a hook that wrote is saved at once, like a tool that may write
        # Otherwise saved with the decision they lead to (before anything runs): one commit
        # per call, and a crash before it only runs the hooks again.
        return True

    async def _permission_hooks(self, call: ToolCall, ev: Evaluation) -> bool:
        """PermissionRequest hooks, before anyone is asked; True when one of them answered
        (allow or deny), recorded as decided by that hook."""
        state = self.state.calls.get(call.id)
        if state is None:
            return False
        if not state.permission_hooked:
            if not hooks_for(self.hook_specs, "PermissionRequest", call.name):
                return False
            await self._run_hooks("PermissionRequest", call)
            state.permission_hooked = True
        answer = state.permission_hook
        if answer is None:
            return False
        verdict = replace(
            ev,
            action=str(answer["decision"]),
            matched_rule=str(answer["by"]),
            reason=answer.get("reason") or f"{answer['decision']} by the hook {answer['by']}",
        )
        self._decide_by_rule(call, verdict, "hook")
        self.flush()
        return True

    async def _post_tool_hooks(self, ran: _Ran) -> _Ran:
        """PostToolUse (or PostToolUseFailure) hooks after a call ran, before its result is
        recorded: what they say for the model follows the output (``model_note``), the files
        they changed join the call's changes, attributed to them."""
        call, result = ran.call, ran.result
        event = "PostToolUseFailure" if result.is_error else "PostToolUse"
        if not hooks_for(self.hook_specs, event, call.name):
            return ran
        extra: dict[str, Any] = (
            {"error": result.output, "is_interrupt": False}
            if result.is_error
            else {"tool_output": result.output, "is_error": False}
        )
        out = await self._run_hooks(event, call, extra)
        note = model_note(notes_of([r["effect"] for r in out.records]))
        if not note:
            return ran
        return _Ran(call, replace(result, output=result.output + note), ran.duration_ms)

    async def _stop_hooks(self, reason: str) -> bool:
        """Stop (SubagentStop in a subagent) hooks when the model ended its turn; True when one
        blocked the stop: its reason becomes the next user message of the same turn."""
        if reason in ("max_steps", "cancelled", "idle") or self.state.head is None:
            return False
        event = "SubagentStop" if "task" in self.state.settings else "Stop"
        info = self.state.head_info()
        continued = info.continued if info is not None else 0
        head = self.state.head
        if head not in self.state.stop_hooks:
            if not hooks_for(self.hook_specs, event):
                return False
            out = await self._run_hooks(event, extra={"stop_hook_active": continued > 0})
            self.flush()
            if out.stop_reason is not None:
                return False
        effects = self.state.stop_hooks.get(head, [])
        feedback = [str(e["feedback"]) for e in effects if e.get("blocked") and e.get("feedback")]
        if not self.state.continue_pending or continued >= MAX_STOP_CONTINUES:
            self.state.continue_pending = False
            return False
        text = "\n\n".join(feedback) or "a Stop hook asked to continue"
        node = self._trigger(lambda s: s.add_user_message([{"type": "text", "text": text}]))
        self.flush()
        self.emit(up.UserMessage(node, text))
        return True

    # ------------------------------------------------------------------ the model

    def request_settings(self) -> RequestSettings:
        if self._settings is None:
            from coder_es.agent.prompt import recorded_prompt

            st = self.state
            self._settings = RequestSettings(
                model=st.model or self.deps.provider.model,
                system=recorded_prompt(st.settings, self.blobs, st.workspace),
                tools=self.deps.decision.tools.definitions(self.deps.decision.offered()),
                max_tokens=int(st.settings.get("max_tokens", self.config.max_tokens)),
            )
        return self._settings

    async def _call_model(self, step: int) -> str | None:
        """One model turn, recorded. Returns an error message if the turn must stop."""
        if self._builder is None:
            self._builder = ContextBuilder(self.request_settings(), blobs=self.blobs)
        built = self._builder.build(
            self.context,
            self.state.head,
            budget=self.config.context_budget,
            metadata={"session_id": self.session_id, "node": self.state.head, "step": step},
        )
        request = built.request
        digest = self.recorder.record(request, stable_prefix(self._sent, request.messages))
        self._sent = request.messages
        attempt = 0
        while True:
            attempt += 1
            try:
                response = await self._stream(with_image_data(request, self.blobs.get))
                break
            except _StreamFailure as failure:
                e = failure.error
                retry = e.retryable and failure.delivered and attempt <= self.config.model_retries
                kind = type(e).__name__
                self._trigger(
                    partial(
                        Session.record_error,
                        kind=kind,
                        message=str(e),
                        retryable=retry,
                        attempt=attempt,
                    )
                )
                self.emit(up.Error(kind, str(e), retry))
                if isinstance(e, ContextTooLongError):
                    plan = plan_compaction(self.context, self.state.head)
                    if plan is not None and self.hook_specs:
                        # Observed and recorded; our compaction is what lets the turn go on,
                        # so a PreCompact hook cannot block it (documented).
                        await self._run_hooks(
                            "PreCompact", extra={"trigger": "auto", "custom_instructions": ""}
                        )
                    if plan is not None:
                        # The summary node becomes the head and the decider calls the model
                        # again with a smaller request. Each compaction covers at least one
                        # more turn or step, so this ends (no plan: the error stands).
                        self._trigger(
                            partial(
                                Session.compact_context,
                                covers=list(plan.covers),
                                summary=plan.summary,
                                produced_by=plan.produced_by,
                            )
                        )
                        self.flush()
                        return None
                if not retry:
                    self.flush()
                    return str(e)
                delay = self.config.retry_delay_s * attempt
                self._trigger(
                    partial(Session.record_retry, attempt=attempt + 1, delay_s=delay, reason=str(e))
                )
                self.flush()
                self.emit(up.Retry(attempt + 1, delay, str(e)))
                await self.deps.clock.sleep(delay)
        provider = self.deps.provider
        node = self._trigger(
            lambda s: s.record_model_response(
                blocks=list(response.content),
                stop_reason=response.stop_reason,
                usage=dict(response.usage),
                provider=provider.name,
                model=response.model or request.model,
                request_id=response.request_id,
                request_digest=digest,
            )
        )
        self.emit(
            up.ModelResponse(
                node,
                step,
                response.stop_reason,
                response.text,
                len(response.tool_calls),
                dict(response.usage),
            )
        )
        return None

    async def _stream(self, request: pt.ModelRequest) -> pt.ModelResponse:
        assembler = ResponseAssembler()
        delivered = False
        emit = self.emit
        try:
            async with contextlib.aclosing(self.deps.provider.stream(request)) as stream:  # type: ignore[type-var]
                async for ev in stream:
                    assembler.feed(ev)
                    if isinstance(ev, pt.TextDelta):
                        delivered = True
                        emit(up.TextDelta(ev.text, ev.index))
                    elif isinstance(ev, pt.ThinkingDelta):
                        delivered = True
                        if ev.thinking:
                            emit(up.ThinkingDelta(ev.thinking, ev.index))
                    elif isinstance(ev, pt.ToolCallStart | pt.BlockComplete):
                        delivered = True
                    elif isinstance(ev, pt.UsageUpdate):
                        emit(up.UsageUpdate(dict(ev.usage)))
                    elif isinstance(ev, pt.Retrying):
                        delivered = False
                        self._trigger(
                            partial(
                                Session.record_retry,
                                attempt=ev.attempt + 1,
                                delay_s=ev.delay_s,
                                reason=str(ev.error),
                            )
                        )
                        self.flush()
                        emit(up.Retry(ev.attempt + 1, ev.delay_s, str(ev.error)))
            return assembler.result()
        except ProviderError as e:
            raise _StreamFailure(e, delivered) from e

    # ------------------------------------------------------------------ permissions

    def _decide_by_rule(self, call: ToolCall, ev: Evaluation, decided_by: str = "rule") -> None:
        self._trigger(
            lambda s: s.decide_permission(
                tool_use_id=call.id,
                tool=call.name,
                subject=ev.subject.text,
                decision=ev.action,
                scope="once",
                matched_rule=ev.matched_rule,
                decided_by=decided_by,
                reason=ev.reason,
            )
        )
        self.emit(
            up.PermissionDecision(
                call.id,
                call.name,
                ev.subject.text,
                ev.action,
                "once",
                decided_by,
                ev.matched_rule,
                ev.reason,
            )
        )

    def _defer(self, call: ToolCall, ev: Evaluation, source: str) -> None:
        """Park the call's question: it waits for an answer from any process (a scheduled
        call: for its window, unless the window is open now and it runs at once)."""
        due, window = None, window_of(ev.matched_rule) if source == "schedule" else None
        if window is not None:
            now = self.deps.clock.now()
            if window.contains(now):
                reason = f"scheduled by {ev.matched_rule}: its window {window.text} is open"
                self._decide_by_rule(call, replace(ev, action="allow", reason=reason), "schedule")
                return
            due = window.next_opening(now)
            ev = replace(ev, reason=f"scheduled for {due:%Y-%m-%d %H:%M} UTC ({window.text})")
        self._trigger(
            lambda s: s.defer_permission(
                tool_use_id=call.id,
                tool=call.name,
                subject=ev.subject.text,
                matched_rule=ev.matched_rule,
                reason=ev.reason,
                source=source,
                suggested_pattern=ev.suggested_pattern,
            )
        )
        if due is not None and window is not None:
            self._trigger(
                partial(
                    Session.schedule_call,
                    tool_use_id=call.id,
                    window=window.text,
                    due=due.isoformat(),
                    at=now.isoformat(),
                )
            )
        self.emit(
            up.PermissionDeferred(
                call.id, call.name, ev.subject.text, source, ev.matched_rule, ev.reason
            )
        )

    def _run_due_calls(self) -> None:
        """A parked turn's scheduled calls whose time has come (by the injected clock) are
        allowed, recorded as answered by the schedule; the resume then runs them."""
        if self.state.parked is None:
            return
        now = self.deps.clock.now()
        due = [
            c
            for c in self.state.waiting_calls()
            if c.due is not None and datetime.fromisoformat(c.due) <= now
        ]
        for c in due:
            # ``at``: the clock's time of the decision (a replay's clock gives it back).
            by = {**origin(self.client), "client": "schedule", "via": self.client}
            by["at"] = now.isoformat()
            self._trigger(
                partial(Session.answer_deferred, tool_use_id=c.id, decision="allow", by=by)
            )
            self._trigger(
                partial(
                    Session.decide_permission,
                    tool_use_id=c.id,
                    tool=c.name,
                    subject=self._subject_of(c.id),
                    decision="allow",
                    scope="once",
                    matched_rule=None,
                    decided_by="schedule",
                    reason=f"its window {c.window} opened at {c.due}",
                )
            )
        if due:
            self.flush()

    def _subject_of(self, call_id: str) -> str:
        """The subject a parked call's ``PermissionDeferred`` recorded."""
        for e in reversed(self.app.unsealed_events(self.session.id)):
            if isinstance(e, Session.PermissionDeferred) and e.tool_use_id == call_id:
                return str(e.subject)
        return ""

    def _park(self, action: d.Park) -> TurnOutcome:
        """The turn stops, waiting: what could run did; the parked calls wait for answers."""
        ids = [c.id for c in action.calls]
        if not action.recorded:
            client = self.client
            self._trigger(lambda s: s.park_turn(tool_use_ids=ids, by=origin(client)))
        self.flush()
        self.emit(up.TurnWaiting(self.session_id, tuple(ids)))
        return self._finish("waiting")

    async def _ask(self, action: d.AskPermission) -> None:
        call, ev = action.call, action.evaluation
        if not action.already_requested:
            self._trigger(
                lambda s: s.request_permission(
                    tool_use_id=call.id,
                    tool=call.name,
                    subject=ev.subject.text,
                    matched_rule=ev.matched_rule,
                )
            )
        if self.hook_specs and await self._permission_hooks(call, ev):
            return
        self.flush()
        question = up.PermissionRequired(
            call.id,
            call.name,
            ev.subject.text,
            dict(call.input),
            ev.matched_rule,
            ev.reason,
            ev.suggested_pattern,
        )
        self.emit(question)
        if self.hook_specs and not action.already_requested:
            # Claude Code's Notification: someone is asked for a permission.
            await self._run_hooks(
                "Notification",
                extra={
                    "message": f"coder-es needs your permission to use {call.name}",
                    "notification_type": "permission_prompt",
                },
            )
            self.flush()
        answer = await self.deps.answerer(question)
        if answer.decision == "defer":
            self._defer(call, ev, answer.decided_by)
            self.flush()
            return
        if answer.decision not in ("allow", "deny") or answer.scope not in ("once", "always"):
            answer = PermissionAnswer.reject(f"invalid answer {answer!r}", answer.decided_by)
        pattern = answer.pattern
        if answer.scope == "always" and pattern is None:
            pattern = ev.suggested_pattern
        reason = answer.reason
        if answer.decision == "deny" and not reason:
            reason = f"rejected by the {answer.decided_by}"
        self._trigger(
            lambda s: s.decide_permission(
                tool_use_id=call.id,
                tool=call.name,
                subject=ev.subject.text,
                decision=answer.decision,
                scope=answer.scope,
                pattern=pattern,
                matched_rule=ev.matched_rule,
                decided_by=answer.decided_by,
                reason=reason,
            )
        )
        self.flush()
        self.emit(
            up.PermissionDecision(
                call.id,
                call.name,
                ev.subject.text,
                answer.decision,
                answer.scope,
                answer.decided_by,
                ev.matched_rule,
                reason,
            )
        )

    # ------------------------------------------------------------------ tools

    def _close(self, action: d.CloseCalls) -> None:
        for closed in action.calls:
            call = closed.call
            # A task cancelled while its child ran: the link to the child is kept (the other
            # events of an interrupted call are not its result's).
            for method, kwargs in self.sink.take(call.id):
                if method == "start_task":
                    self._trigger(partial(Session.start_task, **kwargs))
            self._trigger(
                partial(
                    Session.complete_tool_call,
                    tool_use_id=call.id,
                    name=call.name,
                    output=closed.output,
                    is_error=True,
                )
            )
            self.emit(up.ToolCompleted(call.id, call.name, closed.output, True, 0, False))

    def _context(self, call: ToolCall) -> ToolContext:
        tool = self.deps.decision.tools.get(call.name)
        outside = False
        if tool is not None:
            with contextlib.suppress(Exception):
                outside = tool.subject(tool.parse(call.input), self.root).outside
        emit = self.emit

        def progress(text: str) -> None:
            emit(up.ToolProgress(call.id, text))

        spawner = self.deps.spawner

        return ToolContext(
            root=self.workspace.root,
            tool_use_id=call.id,
            sink=self.sink,
            workspace=self.workspace,
            progress=progress,
            outside_ok=outside,
            cache=self.tool_cache,
            sandbox=self._sandbox(),
            tools=self.deps.decision.tools,
            spawn=None if spawner is None else partial(spawner.run_child, self, call),
        )

    def _sandbox(self) -> SandboxSettings:
        """The session's sandbox settings: read-only when the policy in force says so, and the
        store directory out of every command's reach."""
        base = self.deps.sandbox or SandboxSettings.from_environ()
        hidden = base.hidden
        if self.app.config.backend in ("lmdb", "sqlite"):
            hidden = (*hidden, self.app.config.path.resolve())
        read_only = base.read_only or self.deps.decision.policy.shell_read_only
        # A read-only agent changes nothing that outlives its command: not even a cache (a
        # poisoned cache is read by the next build), only its private /tmp.
        writable = () if read_only else base.writable
        return dataclasses.replace(base, read_only=read_only, hidden=hidden, writable=writable)

    async def _execute(self, call: ToolCall) -> _Ran:
        clock = self.deps.clock
        started = clock.monotonic()
        result = await self.deps.executor.execute(call, self._context(call))
        return _Ran(call, result, int((clock.monotonic() - started) * 1000))

    async def _run_tools(self, action: d.RunTools) -> None:
        self.flush()
        for call in action.calls:
            self.emit(up.ToolStarted(call.id, call.name, dict(call.input)))
        tasks = [asyncio.ensure_future(self._execute(call)) for call in action.calls]
        self._running.update(tasks)
        try:
            for task in tasks:
                ran = await task
                self._running.discard(task)
                if self.hook_specs:
                    ran = await self._post_tool_hooks(ran)
                self._record(ran)
        finally:
            for task in tasks:
                if not task.done():
                    task.cancel()
        if not action.concurrent:
            tool = self.deps.decision.tools.get(action.calls[0].name)
            if tool is None or not tool.read_only:
                self.flush()

    def _record(self, ran: _Ran) -> None:
        call, result = ran.call, ran.result
        # The real output: the event's copy is sealed on the way in, the blob by the blob store.
        capped = cap_output(result.output, self.blobs, self.config.output_limit)
        file_events = self.sink.take(call.id)
        changes = _with_hook_changes(
            [c.to_dict() for c in result.files_changed], self._hook_files.pop(call.id, [])
        )

        def record(s: Session) -> None:
            for method, kwargs in file_events:
                getattr(s, method)(**kwargs)
            s.complete_tool_call(
                tool_use_id=call.id,
                name=call.name,
                output=capped.text,
                output_blob=capped.blob,
                is_error=result.is_error,
                duration_ms=ran.duration_ms,
                files_changed=changes,
            )

        self._trigger(record)
        self.emit(
            up.ToolCompleted(
                call.id,
                call.name,
                capped.text,
                result.is_error,
                ran.duration_ms,
                capped.truncated,
                tuple(changes),
                dict(result.metadata),
            )
        )


def _with_hook_changes(
    changes: list[dict[str, Any]], by_hooks: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The call's file changes with its hooks' after them: a file both changed is one entry
    (the call's ``before``, the hook's ``after``) naming the hook in ``by``, so history,
    ``tree``, ``diff`` and rewind see one step and know who made the last change."""
    if not by_hooks:
        return changes
    out = {c["path"]: dict(c) for c in changes}
    for c in by_hooks:
        old = out.get(c["path"])
        if old is None:
            out[c["path"]] = dict(c)
        else:
            out[c["path"]] = {**old, **{k: v for k, v in c.items() if k != "before"}}
    return list(out.values())
