"""The decider: from the session's state, the loop's next action. No I/O, no clock, no randomness.

``decide(state, ctx)`` looks at the head of the session and returns what the loop must do next:

- ``CallModel``: the head is a user message, a summary, or the answer to every tool call of the
  last response (and the step limit is not reached);
- ``RecordToolCalls``: the last response has tool_use blocks not yet recorded as requested;
- ``DecideByRule`` / ``AskPermission``: a requested call has no permission decision yet (the rules
  decide, or someone must be asked);
- ``CloseCalls``: calls that get a result without running (unknown tool, invalid arguments,
  permission denied, interrupted by a cancellation or a crash);
- ``RunTools``: the next allowed calls, in block order: a run of consecutive read-only (or
  ``parallel``: ``task``) calls together (they run concurrently), or one call that may write;
- ``DeferPermission``: a rule or a hook parks a call's question (``defer``) instead of asking;
- ``Park``: every call that could run did, and the others wait for an answer given from any
  process (``coder-es approve`` / ``deny``): the turn stops in a recorded "waiting" state and
  goes on, the same turn, once they are answered;
- ``Done``: the model stopped, the step limit was reached, or the turn was cancelled.

Calls are worked through strictly in block order, so results are recorded in the order the model
asked for them. Every permission of a response is decided before any of its tools run, so a
user is asked everything up front.

Crash recovery (``recover``): a session whose process died can be resumed from its events. A call
that was allowed but has no result may have been running when the process died. Read-only calls
are simply run again; a call that may write is closed with an "interrupted" error result telling
the model to check the state before retrying, because running a half-done shell command or edit
twice is not safe. Unanswered permission requests are asked again; a model call without a
recorded response is made again (nothing of it was recorded, so nothing is lost). A parked call
answered while its turn waited never started: it runs when the turn is taken up again
(``TurnResumed``), and only a crash after that closes it as interrupted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from coder_es.agent.settings import preset_in_force, rules_from_records
from coder_es.agent.state import CallState, LoopState
from coder_es.domain.session import SUMMARY, USER, NodeId
from coder_es.permissions.policy import Evaluation, Policy
from coder_es.permissions.subject import Subject
from coder_es.tools.base import ToolCall
from coder_es.tools.registry import ToolRegistry
from coder_es.tools.schema import ToolInputError

INTERRUPTED_BY_CANCEL = (
    "Interrupted: the user cancelled the turn before this tool call finished. It may have "
    "partially run; check the current state before retrying."
)
INTERRUPTED_BY_CRASH = (
    "Interrupted: the agent process stopped while this tool call was running. It may have "
    "partially run; check the current state before retrying."
)
ABANDONED = "Not run: the turn ended before this tool call was executed."
CANCELLED_BEFORE_RUN = (
    "Not run: the user cancelled the turn before this tool call was allowed to run; nothing of "
    "it happened."
)


@dataclass(frozen=True)
class DecisionContext:
    """Everything besides the events that decisions depend on: code and configuration."""

    tools: ToolRegistry
    policy: Policy
    max_steps: int = 50

    def offers(self, name: str) -> bool:
        """Whether the model is offered this tool: the preset's and user rules' tools, and MCP
        tools the preset or a rule lets through (``Policy.offers_mcp``)."""
        if name in self.policy.tools:
            return True
        effect = getattr(self.tools.get(name), "effect", None)
        return isinstance(effect, str) and self.policy.offers_mcp(name, effect)

    def offered(self) -> tuple[str, ...]:
        return tuple(n for n in self.tools.names() if self.offers(n))

    def with_permissions(self, rules: Iterable[dict[str, Any]], default: str) -> DecisionContext:
        """The same context under other user rules (a ``PermissionsChanged``); the agent preset
        stays, since it is chosen when the session is opened, not by the rules."""
        policy = replace(self.policy, user_rules=rules_from_records(rules), default=default)
        return replace(self, policy=policy)

    def with_agent(self, agent: str, settings: Mapping[str, Any]) -> DecisionContext:
        """The same context under another agent preset (a ``SettingsChanged``): its tools, as
        the session's ``settings`` record them (``recorded_tools``), and its rules; the user's
        rules stay."""
        preset = preset_in_force(agent, settings)
        return replace(self, policy=replace(self.policy, preset=preset))


@dataclass(frozen=True)
class CallModel:
    step: int


@dataclass(frozen=True)
class RecordToolCalls:
    node: NodeId
    calls: tuple[ToolCall, ...]


@dataclass(frozen=True)
class DecideByRule:
    call: ToolCall
    evaluation: Evaluation
    decided_by: str = "rule"  # "rule" | "hook"


@dataclass(frozen=True)
class AskPermission:
    call: ToolCall
    evaluation: Evaluation
    # The PermissionRequested event is already recorded (a resumed session asks again).
    already_requested: bool


@dataclass(frozen=True)
class DeferPermission:
    call: ToolCall
    evaluation: Evaluation
    source: str  # "rule" | "hook" | "schedule"


@dataclass(frozen=True)
class Park:
    """The calls waiting for an answer; ``recorded``: this very wait is already recorded
    (a resumed run that finds the questions still unanswered only stops again)."""

    calls: tuple[ToolCall, ...]
    recorded: bool


@dataclass(frozen=True)
class ClosedCall:
    call: ToolCall
    output: str


@dataclass(frozen=True)
class CloseCalls:
    calls: tuple[ClosedCall, ...]


@dataclass(frozen=True)
class RunTools:
    calls: tuple[ToolCall, ...]
    concurrent: bool


@dataclass(frozen=True)
class Done:
    reason: str  # a stop reason ("end_turn", ...), "max_steps", "cancelled" or "idle"


Action = (
    CallModel
    | RecordToolCalls
    | DecideByRule
    | AskPermission
    | DeferPermission
    | CloseCalls
    | RunTools
    | Park
    | Done
)


def _call(c: CallState) -> ToolCall:
    return ToolCall(c.id, c.name, c.input)


def check_call(call: ToolCall, ctx: DecisionContext, root: Path) -> tuple[Any, Subject] | str:
    """(parsed arguments, permission subject), or the error the model gets for this call."""
    tool = ctx.tools.get(call.name)
    if tool is None or not ctx.offers(call.name):
        offered = ", ".join(ctx.offered())
        return f"Unknown tool {call.name!r}. Available tools: {offered}."
    try:
        args = tool.parse(call.input)
        subject = tool.subject(args, root)
    except ToolInputError as e:
        return f"Invalid arguments for {call.name}: {e}"
    except Exception as e:  # a path the sandbox rejects outright, etc.
        return f"Invalid arguments for {call.name}: {e}"
    return args, subject


def evaluate(
    call: CallState, state: LoopState, ctx: DecisionContext, subject: Subject
) -> Evaluation:
    return ctx.policy.evaluate(call.name, subject, always=state.always, repeats=call.repeats)


def decide(state: LoopState, ctx: DecisionContext) -> Action:
    info = state.head_info()
    if info is None:
        return Done("idle")
    root = Path(state.workspace)
    if info.cancelled:
        pending = state.open_calls()
        if pending:
            # Only a call that was allowed can have started; one still waiting for its
            # permission (Ctrl-C at the question) never ran, and the model is told so.
            return CloseCalls(
                tuple(
                    ClosedCall(
                        _call(c),
                        INTERRUPTED_BY_CANCEL if c.decision == "allow" else CANCELLED_BEFORE_RUN,
                    )
                    for c in pending
                )
            )
        return Done("cancelled")
    if info.kind in (USER, SUMMARY):
        return _call_model(info.steps, ctx)
    node = info.assistant
    assert node is not None
    response = state.responses[node]
    if not response.tool_uses:
        if response.stop_reason == "pause_turn":
            return _call_model(info.steps, ctx)
        return Done(response.stop_reason)

    missing = tuple(
        ToolCall(cid, name, inp)
        for cid, name, inp in response.tool_uses
        if cid not in state.calls or state.calls[cid].node != node
    )
    if missing:
        return RecordToolCalls(node, missing)

    open_calls = state.open_calls()
    checked: list[tuple[CallState, tuple[Any, Subject] | str]] = [
        (c, check_call(_call(c), ctx, root)) for c in open_calls
    ]
    # Every permission first, so a user is asked everything before anything runs.
    for c, result in checked:
        if isinstance(result, str) or c.decision is not None or c.deferred:
            continue
        evaluation = evaluate(c, state, ctx, result[1])
        by_hook = _with_hook(c, evaluation)
        if by_hook is not None:
            return by_hook
        if evaluation.action == "defer":
            return DeferPermission(_call(c), evaluation, "rule")
        if evaluation.action == "schedule":
            # Runs in the rule's window: the runner, which has the clock, decides now or parks.
            return DeferPermission(_call(c), evaluation, "schedule")
        if evaluation.action == "ask":
            return AskPermission(_call(c), evaluation, c.permission_requested)
        return DecideByRule(_call(c), evaluation)

    # Parked calls wait; the others go on in call order around them.
    waiting = [c for c, r in checked if not isinstance(r, str) and c.deferred and not c.decision]
    waiting_ids = {c.id for c in waiting}
    for i, (c, result) in enumerate(checked):
        if c.id in waiting_ids:
            continue
        if isinstance(result, str):
            return CloseCalls((ClosedCall(_call(c), result),))
        if c.decision == "deny":
            reason = c.decision_reason or "the permission was refused"
            return CloseCalls((ClosedCall(_call(c), f"Permission denied: {reason}"),))
        tool = ctx.tools.get(c.name)
        assert tool is not None
        if not (tool.read_only or tool.parallel):
            return RunTools((_call(c),), concurrent=False)
        batch = [_call(c)]
        for c2, r2 in checked[i + 1 :]:
            t2 = ctx.tools.get(c2.name)
            if (
                isinstance(r2, str)
                or c2.decision != "allow"
                or t2 is None
                or not (t2.read_only or t2.parallel)
            ):
                break
            batch.append(_call(c2))
        return RunTools(tuple(batch), concurrent=len(batch) > 1)

    if waiting:
        ids = tuple(c.id for c in waiting)
        recorded = state.parked is not None and state.parked == (state.head, ids)
        return Park(tuple(_call(c) for c in waiting), recorded)
    return _call_model(info.steps, ctx)


def _with_hook(c: CallState, ev: Evaluation) -> Action | None:
    """A PreToolUse hook's decision over the rules' (Claude Code's semantics): ``deny`` denies;
    ``ask`` asks even where a rule allows; ``defer`` parks the question (the turn waits for an
    answer from any process, even when the response made several calls); ``allow`` skips the
    question but never a rule's deny (nor a rule's defer)."""
    decision = c.hook_decision
    if decision is None:
        return None
    rule = c.hook_by or "hook"
    if decision == "deny":
        reason = c.hook_reason or f"denied by the hook {rule}"
        return DecideByRule(
            _call(c), replace(ev, action="deny", matched_rule=rule, reason=reason), "hook"
        )
    if decision == "defer":
        if ev.action == "deny":
            return None
        reason = c.hook_reason or f"the hook {rule} defers"
        return DeferPermission(
            _call(c), replace(ev, action="defer", matched_rule=rule, reason=reason), "hook"
        )
    if decision == "ask":
        if ev.action in ("deny", "defer"):
            return None
        reason = c.hook_reason or f"the hook {rule} asks"
        return AskPermission(
            _call(c),
            replace(ev, action="ask", matched_rule=rule, reason=reason),
            c.permission_requested,
        )
    if ev.action == "ask":  # an allow never skips a rule's defer: the rule wants a person
        reason = c.hook_reason or f"allowed by the hook {rule}"
        return DecideByRule(
            _call(c), replace(ev, action="allow", matched_rule=rule, reason=reason), "hook"
        )
    return None


def _call_model(steps: int, ctx: DecisionContext) -> Action:
    if steps >= ctx.max_steps:
        return Done("max_steps")
    return CallModel(steps + 1)


def recover(state: LoopState, ctx: DecisionContext) -> CloseCalls | None:
    """What to record before resuming a session whose process may have died mid-turn."""
    closed = []
    for c in state.open_calls():
        if c.decision != "allow":
            continue
        if c.deferred and state.parked is not None:
            continue  # answered while the turn was parked: it never started
        tool = ctx.tools.get(c.name)
        if tool is not None and not tool.read_only:
            closed.append(ClosedCall(_call(c), INTERRUPTED_BY_CRASH))
    return CloseCalls(tuple(closed)) if closed else None


def abandon(state: LoopState) -> CloseCalls | None:
    """Results for the open calls of an unfinished turn, before a new user message is added
    (a model requires an answer to every tool call it made)."""
    pending = state.open_calls()
    if not pending:
        return None
    return CloseCalls(tuple(ClosedCall(_call(c), _abandoned(c)) for c in pending))


def _abandoned(c: CallState) -> str:
    if c.deferred and c.decision == "deny":
        # A parked call the user denied: the model reads the denial (the user's message), as
        # the turn taken up would have shown it.
        return f"Permission denied: {c.decision_reason or 'the permission was refused'}"
    return ABANDONED


def parked_in_the_way(state: LoopState, session: str) -> str | None:
    """Why a new user message may not be added now (None: it may): the turn is parked and a
    question of it waits for an answer, or an allowed call of it has not run yet. A new message
    would close those calls unrun (``abandon``) and the answer, or the wait for one, would be
    lost. A call the user denied is no obstacle: denying is how a parked call is dropped."""
    if state.parked is None:
        return None
    waiting = state.waiting_calls()
    if waiting:
        return (
            f"session {session} waits for answers to its parked turn ({_named(waiting)}); the "
            f"new prompt was not sent: answer with `coder-es approve {session}` or "
            f"`coder-es deny {session}` (a denied call is dropped; `coder-es pending` lists the "
            "questions), then send it again"
        )
    allowed = [c for c in state.open_calls() if c.deferred and c.decision == "allow"]
    if allowed:
        return (
            f"session {session}'s parked turn has allowed calls that have not run yet "
            f"({_named(allowed)}); the new prompt was not sent: continue the turn first with "
            f"`coder-es run --session {session}`, then send it again"
        )
    return None


def _named(calls: list[CallState]) -> str:
    return ", ".join(f"{c.name} call {c.id}" for c in calls)
