"""The loop's view of a session, folded from its events one at a time.

``LoopState.apply(event)`` does O(1) work per event, so the state of a long session is kept up
to date by applying each new event as it is recorded; ``LoopState.from_events`` rebuilds it from
zero (a crashed session resumes that way). The state holds only what the decider needs: the
conversation nodes (kind and parent), the tool calls of each model response and where each call
stands (requested, permission asked, decided, completed), the "always" answers, the user's
permission rules in force, and the head.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from coder_es.domain.chain import canonical_json
from coder_es.domain.session import ASSISTANT, SUMMARY, TOOL_RESULT, USER, NodeId, Session
from coder_es.domain.settings import RecordedSettings


@dataclass
class NodeInfo:
    kind: str
    parent: NodeId | None
    # Model responses since the user message that started this node's turn (inclusive).
    steps: int
    # The model response whose tool calls this node answers (tool results), or the node itself
    # (a model response); None for user messages and summaries.
    assistant: NodeId | None
    # The turn was cancelled at this node or at an ancestor within the same turn.
    cancelled: bool = False
    # The last tool call on the path up to this node: (signature, repeats). A model response's
    # own calls update it as they are requested; a branch rewound away from never reaches it.
    last_call: tuple[str, int] | None = None
    # Times a Stop hook kept this turn going (its user messages included): Claude Code's
    # ``stop_hook_active`` is this > 0.
    continued: int = 0


@dataclass
class CallState:
    id: str
    name: str
    input: dict[str, Any]
    node: NodeId
    # How many calls right before this one were identical to it (doom-loop detection).
    repeats: int = 0
    permission_requested: bool = False
    decision: str | None = None  # "allow" | "deny"
    decision_reason: str | None = None
    completed: bool = False
    # The PreToolUse hooks ran (``HookRan``); their combined decision, why, and whose.
    pre_hooked: bool = False
    hook_decision: str | None = None  # "allow" | "ask" | "defer" | "deny"
    hook_reason: str | None = None
    hook_by: str | None = None
    # The PermissionRequest hooks ran; their answer (allow / deny) if any.
    permission_hooked: bool = False
    permission_hook: dict[str, Any] | None = None
    # The question was parked (``PermissionDeferred``): it waits for an answer from any
    # process instead of being asked now.
    deferred: bool = False
    # A scheduled call (``CallScheduled``): when it may run (ISO 8601 UTC) and its window.
    due: str | None = None
    window: str | None = None


@dataclass
class ResponseInfo:
    stop_reason: str
    # The tool_use blocks, in order: (id, name, input).
    tool_uses: list[tuple[str, str, dict[str, Any]]]


@dataclass
class LoopState:
    workspace: str = ""
    agent: str = "build"
    provider: str = ""
    model: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    head: NodeId | None = None
    version: int = 0
    nodes: dict[NodeId, NodeInfo] = field(default_factory=dict)
    responses: dict[NodeId, ResponseInfo] = field(default_factory=dict)
    calls: dict[str, CallState] = field(default_factory=dict)
    always: list[dict[str, Any]] = field(default_factory=list)
    last_request_digest: str | None = None
    # The last PermissionsChanged ({rules, default}); None: the Started settings' rules hold.
    permissions: dict[str, Any] | None = None
    # The node where the last StepLimitReached stopped a turn (so a resume does not repeat it).
    step_limit_at: NodeId | None = None
    # The MCP servers and their tools, as the last McpToolsListed recorded them.
    mcp_servers: list[dict[str, Any]] = field(default_factory=list)
    # The request budget of the last SettingsChanged; None: the Started settings' (or the
    # loop's configuration, for a session recorded before budgets were).
    context_budget: int | None = None
    # The hooks in force (``HookSpec`` records): the last HooksChanged's; None: the Started
    # settings' ``hooks``.
    hooks: list[dict[str, Any]] | None = None
    # The Stop hooks' effects recorded at a node (a resumed turn does not run them twice).
    stop_hooks: dict[NodeId, list[dict[str, Any]]] = field(default_factory=dict)
    # A Stop hook blocked the stop: the next user message continues the same turn.
    continue_pending: bool = False
    # The calls the last ``TurnParked`` left waiting, and the head it parked at.
    parked: tuple[NodeId | None, tuple[str, ...]] | None = None
    # What the session runs with, as its events say (``coder_es.agent.settings``): the one fold
    # of the settings events, which the service, the decider and replay read too.
    recorded: RecordedSettings = field(default_factory=RecordedSettings)

    @classmethod
    def from_events(cls, events: Iterable[Any]) -> LoopState:
        state = cls()
        for event in events:
            state.apply(event)
        return state

    # ------------------------------------------------------------------ folding

    def apply(self, event: Any) -> None:
        version = event.originator_version
        if version <= self.version:
            return  # already applied (the same event may come from a save and a reload)
        self.version = version
        handler = _HANDLERS.get(type(event))
        if handler is not None:
            handler(self, event)

    def _started(self, e: Session.Started) -> None:
        self.workspace, self.agent, self.provider, self.model = (
            e.workspace,
            e.agent,
            e.provider,
            e.model,
        )
        self.settings = dict(e.settings)
        self.recorded = self.recorded.apply(e)

    def _add_node(self, e: Any, kind: str) -> None:
        node = str(e.originator_version)
        parent = e.parent
        pinfo = self.nodes.get(parent) if parent is not None else None
        cancelled = False
        if kind == USER or pinfo is None:
            steps, assistant = 0, None
        else:
            steps, cancelled = pinfo.steps, pinfo.cancelled
            assistant = pinfo.assistant if kind == TOOL_RESULT else None
        if kind == ASSISTANT:
            steps += 1
            assistant = node
        # A tool result follows every call of its response (results chain one after the other,
        # and a later call's request may come after an earlier call's result).
        before = self.nodes.get(assistant) if kind == TOOL_RESULT and assistant else pinfo
        last_call = before.last_call if before is not None else None
        continued = pinfo.continued if pinfo is not None else 0
        if kind == USER:
            continued = continued + 1 if self.continue_pending else 0
            self.continue_pending = False
        self.nodes[node] = NodeInfo(
            kind, parent, steps, assistant, cancelled, last_call, continued=continued
        )
        self.head = node

    def _user(self, e: Session.UserMessageAdded) -> None:
        self._add_node(e, USER)

    def _responded(self, e: Session.ModelResponded) -> None:
        self._add_node(e, ASSISTANT)
        uses = [
            (str(b.get("id", "")), str(b.get("name", "")), dict(b.get("input") or {}))
            for b in e.blocks
            if b.get("type") == "tool_use"
        ]
        self.responses[str(e.originator_version)] = ResponseInfo(e.stop_reason, uses)
        self.last_request_digest = e.request_digest

    def _tool_requested(self, e: Session.ToolCallRequested) -> None:
        # Only the calls on the path to this response count (not those of rewound branches).
        signature = e.name + "\0" + canonical_json(e.input)
        info = self.nodes.get(e.node)
        previous = info.last_call if info is not None else None
        repeats = previous[1] + 1 if previous is not None and previous[0] == signature else 0
        if info is not None:
            info.last_call = (signature, repeats)
        self.calls[e.tool_use_id] = CallState(
            e.tool_use_id, e.name, dict(e.input), e.node, repeats=repeats
        )

    def _permission_requested(self, e: Session.PermissionRequested) -> None:
        call = self.calls.get(e.tool_use_id)
        if call is not None:
            call.permission_requested = True

    def _permission_decided(self, e: Session.PermissionDecided) -> None:
        call = self.calls.get(e.tool_use_id)
        if call is not None:
            call.decision, call.decision_reason = e.decision, e.reason
        if e.scope == "always":
            self.always.append({"tool": e.tool, "pattern": e.pattern, "decision": e.decision})

    def _permission_deferred(self, e: Session.PermissionDeferred) -> None:
        call = self.calls.get(e.tool_use_id)
        if call is not None:
            call.deferred = True

    def _call_scheduled(self, e: Session.CallScheduled) -> None:
        call = self.calls.get(e.tool_use_id)
        if call is not None:
            call.due, call.window = e.due, e.window

    def _turn_parked(self, e: Session.TurnParked) -> None:
        self.parked = (e.node, tuple(e.tool_use_ids))

    def _tool_completed(self, e: Session.ToolCallCompleted) -> None:
        self._add_node(e, TOOL_RESULT)
        call = self.calls.get(e.tool_use_id)
        if call is not None:
            call.completed = True

    def _compacted(self, e: Session.ContextCompacted) -> None:
        parent = self.nodes.get(e.parent) if e.parent is not None else None
        self._add_node(e, SUMMARY)
        if parent is not None:
            # A summary continues the turn it was made in.
            info = self.nodes[str(e.originator_version)]
            info.steps = parent.steps
            info.cancelled = parent.cancelled

    def _head_moved(self, e: Session.HeadMoved) -> None:
        self.head = e.node

    def _permissions_changed(self, e: Session.PermissionsChanged) -> None:
        self.permissions = {"rules": [dict(r) for r in e.rules], "default": e.default}
        self.recorded = self.recorded.apply(e)

    def _settings_changed(self, e: Session.SettingsChanged) -> None:
        self.agent, self.provider, self.model = e.agent, e.provider, e.model
        self.context_budget = e.context_budget
        self.recorded = self.recorded.apply(e)

    def _hook_ran(self, e: Session.HookRan) -> None:
        effect = e.effect
        call = self.calls.get(e.tool_use_id) if e.tool_use_id else None
        if e.hook_event == "PreToolUse" and call is not None:
            call.pre_hooked = True
            if isinstance(effect.get("updated_input"), dict):
                call.input = dict(effect["updated_input"])
            decision = effect.get("decision")
            if decision in _HOOK_RANK and _HOOK_RANK[decision] > _HOOK_RANK.get(
                call.hook_decision or "", -1
            ):
                call.hook_decision = decision
                call.hook_reason = effect.get("reason")
                call.hook_by = e.hook
        elif e.hook_event == "PermissionRequest" and call is not None:
            call.permission_hooked = True
            if isinstance(effect.get("updated_input"), dict):
                call.input = dict(effect["updated_input"])
            if effect.get("decision") in ("allow", "deny") and (
                call.permission_hook is None or effect["decision"] == "deny"
            ):
                call.permission_hook = {
                    "decision": effect["decision"],
                    "reason": effect.get("reason"),
                    "by": e.hook,
                }
        elif e.hook_event in ("Stop", "SubagentStop") and self.head is not None:
            self.stop_hooks.setdefault(self.head, []).append(dict(effect))
            if effect.get("blocked"):
                self.continue_pending = True

    def _hooks_changed(self, e: Session.HooksChanged) -> None:
        self.hooks = [dict(h) for h in e.hooks]
        self.recorded = self.recorded.apply(e)

    def _step_limit_reached(self, e: Session.StepLimitReached) -> None:
        self.step_limit_at = e.node

    def _mcp_tools_listed(self, e: Session.McpToolsListed) -> None:
        self.mcp_servers = [dict(s) for s in e.servers]

    def _cancelled(self, e: Session.TurnCancelled) -> None:
        if e.node is not None and e.node in self.nodes:
            self.nodes[e.node].cancelled = True

    def _resumed(self, e: Session.TurnResumed) -> None:
        if e.node is not None and e.node in self.nodes:
            self.nodes[e.node].cancelled = False
        # A parked turn taken up again: its answered calls may run from here (a crash after
        # this point is an ordinary crash: a writing call is closed as interrupted).
        self.parked = None

    # ------------------------------------------------------------------ queries

    def permissions_in_force(self) -> tuple[list[dict[str, Any]], str]:
        """The user's rules and default: the last PermissionsChanged's, else the Started ones."""
        return self.recorded.permission_records()

    def hooks_in_force(self) -> list[dict[str, Any]]:
        return self.recorded.hook_records()

    def head_info(self) -> NodeInfo | None:
        return self.nodes.get(self.head) if self.head is not None else None

    def turn_response(self) -> NodeId | None:
        """The model response whose tool calls the head is working through, if any."""
        info = self.head_info()
        return info.assistant if info is not None else None

    def waiting_calls(self) -> list[CallState]:
        """The current response's parked calls that no one has answered yet, in block order."""
        return [c for c in self.open_calls() if c.deferred and c.decision is None]

    def open_calls(self) -> list[CallState]:
        """The current response's tool calls that have no result yet, in block order."""
        node = self.turn_response()
        if node is None:
            return []
        out = []
        for call_id, _name, _input in self.responses[node].tool_uses:
            call = self.calls.get(call_id)
            if call is None or (call.node == node and not call.completed):
                out.append(call or CallState(call_id, _name, _input, node))
        return out


_HANDLERS: dict[type, Any] = {
    Session.Started: LoopState._started,
    Session.UserMessageAdded: LoopState._user,
    Session.ModelResponded: LoopState._responded,
    Session.ToolCallRequested: LoopState._tool_requested,
    Session.PermissionRequested: LoopState._permission_requested,
    Session.PermissionDecided: LoopState._permission_decided,
    Session.PermissionDeferred: LoopState._permission_deferred,
    Session.TurnParked: LoopState._turn_parked,
    Session.CallScheduled: LoopState._call_scheduled,
    Session.ToolCallCompleted: LoopState._tool_completed,
    Session.ContextCompacted: LoopState._compacted,
    Session.HeadMoved: LoopState._head_moved,
    Session.TurnCancelled: LoopState._cancelled,
    Session.TurnResumed: LoopState._resumed,
    Session.StepLimitReached: LoopState._step_limit_reached,
    Session.PermissionsChanged: LoopState._permissions_changed,
    Session.McpToolsListed: LoopState._mcp_tools_listed,
    Session.SettingsChanged: LoopState._settings_changed,
    Session.HookRan: LoopState._hook_ran,
    Session.HooksChanged: LoopState._hooks_changed,
}
_HOOK_RANK = {"allow": 0, "ask": 1, "defer": 2, "deny": 3}
