"""Running ``task`` calls: each starts a child session forked from the parent and runs its turn.

The child is a session like any other (it can be listed, inspected, rewound, replayed):

- forked from the node the parent's model answered when it called ``task`` (the parent's
  conversation up to that response; nothing is copied), its ``Started`` naming the parent and
  that node, and ``settings["task"]`` naming the tool_use id, agent and description;
- the parent records ``TaskStarted`` (tool_use id -> child session) with the task's result;
- the child's lease is its own session's, held while it runs;
- its permissions: ``coder_es.permissions.subagents.child_policy`` (never more than the
  parent's); its questions go to the parent's answerer, labelled with the child's session and
  one at a time across the parent's children;
- its progress reaches the parent's client as tool progress of the ``task`` call;
- cancelling the parent's turn cancels the child's (recorded in the child) and the task call;
- its final text is the task's result; the files it changed (net, per path) are the result's
  ``files_changed``, so the parent's file history holds them and rewinding the parent past the
  call restores them.

What the child runs with (its model, tool executor, answerer, id) comes from ``TaskRunner.seams``:
a live replay overrides it to serve the child's recorded model calls and permission answers
(``replay.children``) while everything else here runs as it does for a real run.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any
from uuid import UUID

from coder_es.agent import updates as up
from coder_es.agent.decider import DecisionContext
from coder_es.agent.runner import AgentLoop, LoopDeps, PermissionAnswerer, TurnOutcome
from coder_es.agent.settings import SettingsConfig, session_settings
from coder_es.domain.session import Session
from coder_es.permissions.policy import PermissionAnswer
from coder_es.permissions.subagents import AgentDefinition, child_policy, net_changes
from coder_es.providers.base import Provider
from coder_es.tools.base import FileChange, ToolCall, ToolResult
from coder_es.tools.registry import ToolExecutor

ProviderFactory = Callable[[str, str], Provider]


@dataclass(frozen=True)
class ChildSeams:
    """What one child runs with."""

    provider: Provider
    executor: ToolExecutor
    answerer: PermissionAnswerer | None = None
    """Who answers its permission questions (asked labelled, one at a time across the parent's
    children); None: the parent's answerer."""
    session_id: UUID | None = None
    """The child session's id; None: a new one."""
    attach: Callable[[AgentLoop], None] | None = None
    """Called with the child's loop before its turn starts."""


class TaskRunner:
    """The ``Spawner`` of a service's loops."""

    def __init__(self, provider_factory: ProviderFactory) -> None:
        self.provider_factory = provider_factory

    def seams(self, parent: AgentLoop, call: ToolCall, provider: str, model: str) -> ChildSeams:
        """The child's seams: the parent's executor and answerer, a provider of its own."""
        return ChildSeams(self.provider_factory(provider, model), parent.deps.executor)

    async def run_child(
        self, parent: AgentLoop, call: ToolCall, definition: AgentDefinition, args: Any
    ) -> ToolResult:
        app, state = parent.app, parent.state
        response = state.turn_response()
        info = state.nodes.get(response) if response is not None else None
        fork = info.parent if info is not None else state.head
        policy = child_policy(definition, parent.deps.decision.policy)
        steps = definition.max_steps
        provider_name = state.provider or parent.deps.provider.name
        seams = self.seams(
            parent,
            call,
            provider_name,
            definition.model or state.model or parent.deps.provider.model,
        )
        provider = seams.provider
        settings = dict(state.settings)
        settings["permissions"] = policy.to_settings()
        settings["max_steps"] = steps
        # What it is offered, as recorded (a replay or a resume of the child offers the same).
        settings["subagents"] = False
        settings["hooks"] = state.hooks_in_force()
        settings["tools"] = list(policy.preset.tools)
        settings["read_only_shell"] = policy.preset.read_only_shell
        settings["task"] = {
            "tool_use_id": call.id,
            "agent": definition.name,
            "description": args.description,
        }
        child = app.start_session(
            workspace=state.workspace,
            agent=policy.preset.name,
            provider=provider_name,
            model=provider.model,
            title=args.description,
            parent_session=parent.session_id,
            parent_node=fork,
            settings=settings,
            id=seams.session_id,
        )
        child_id = str(child.id)
        # The child runs with what its own events say (as its resume and replay do).
        tools = parent.deps.decision.tools
        given = SettingsConfig(tools=tools, max_steps=steps)
        in_force = session_settings(app.session_events(child.id), given)
        # Recorded with the task's result (so in call order); the child's Started already
        # names the parent, the node and the call, should the parent stop before that.
        parent.sink.start_task(
            tool_use_id=call.id,
            child_session=child_id,
            agent=definition.name,
            description=args.description,
        )
        label = f"[{definition.name} {child_id[:8]}]"
        deps = LoopDeps(
            provider=provider,
            executor=seams.executor,
            answerer=partial(_ask_for_child, parent, child_id, seams.answerer),
            decision=DecisionContext(
                in_force.tools if in_force.tools is not None else tools,
                in_force.policy,
                in_force.max_steps,
            ),
            clock=parent.deps.clock,
            sandbox=parent.deps.sandbox,
            hook_runner=parent.deps.hook_runner,
        )
        emit = partial(_forward, parent, call.id, child_id, label)
        config = dataclasses.replace(parent.config, max_steps=steps)
        prompt = f"{definition.prompt}\n\n{args.prompt}" if definition.prompt else args.prompt
        lease = app.leases.acquire(child_id, f"task {call.id} of {parent.session_id}")
        try:
            loop = AgentLoop(app, child.id, deps, emit=emit, config=config)
            if seams.attach is not None:
                seams.attach(loop)
            running = asyncio.ensure_future(loop.send(prompt))
            try:
                outcome = await asyncio.shield(running)
            except asyncio.CancelledError:
                loop.cancel_reason = "the parent session's turn was cancelled"
                running.cancel()
                await asyncio.gather(running, return_exceptions=True)
                raise
        finally:
            lease.release()
            await provider.aclose()
        return _result(app, loop, outcome, definition)


def _result(app: Any, loop: AgentLoop, outcome: TurnOutcome, definition: AgentDefinition) -> Any:
    events = app.unsealed_events(loop.session.id)
    final = ""
    changes: list[dict[str, Any]] = []
    for event in events:
        if isinstance(event, Session.ModelResponded):
            final = "".join(b.get("text", "") for b in event.blocks if b.get("type") == "text")
        elif isinstance(event, Session.ToolCallCompleted):
            changes += event.files_changed
    text = final.strip() or "(the subagent gave no final answer)"
    failed = outcome.reason in ("error", "cancelled")
    if outcome.reason == "max_steps":
        text += f"\n\n[the subagent stopped at its step limit of {definition.max_steps}]"
    elif failed:
        text += f"\n\n[the subagent stopped: {outcome.error or outcome.reason}]"
    return ToolResult(
        text,
        is_error=failed,
        files_changed=tuple(
            FileChange(c["path"], c["before"], c["after"]) for c in net_changes(changes)
        ),
        metadata={"child_session": loop.session_id, "agent": definition.name},
    )


def _forward(parent: AgentLoop, call_id: str, child_id: str, label: str, update: up.Update) -> None:
    """A child's updates, as the parent's client sees them: tool progress of the task call."""
    if isinstance(update, up.ToolStarted):
        parent.emit(up.ToolProgress(call_id, f"{label} {update.name} {_brief(update.input)}"))
    elif isinstance(update, up.ToolCompleted):
        status = "failed" if update.is_error else "done"
        parent.emit(up.ToolProgress(call_id, f"{label} {update.name} {status}"))
    elif isinstance(update, up.PermissionDecision):
        parent.emit(dataclasses.replace(update, session=child_id))
    elif isinstance(update, up.TurnEnded):
        parent.emit(up.ToolProgress(call_id, f"{label} finished ({update.reason})"))


def _brief(value: dict[str, Any]) -> str:
    text = " ".join(f"{k}={v}" for k, v in value.items())
    return text if len(text) <= 80 else text[:77] + "..."


async def _ask_for_child(
    parent: AgentLoop,
    child_id: str,
    answerer: PermissionAnswerer | None,
    question: up.PermissionRequired,
) -> PermissionAnswer:
    labelled = dataclasses.replace(question, session=child_id)
    async with parent.questions:
        parent.emit(labelled)
        return await (answerer or parent.deps.answerer)(labelled)
