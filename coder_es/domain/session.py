"""The Session aggregate and its event vocabulary (v1).

One aggregate per session. Conversation nodes (user messages, model responses, tool results,
compaction summaries) are events that carry the id of their parent node, so a session is a tree;
``head`` points at the node the next message attaches to. A node's id is the version number of the
event that created it: deterministic, unique within the session and ordered, which keeps replays
byte-comparable. Nothing is ever removed: forks and rewinds only move the head.

Event fields are JSON-native (str, int, float, bool, None, lists, dicts) so that every backend
stores them faithfully and the hash chain (``coder_es.domain.chain``) can be recomputed from any
copy. Released event classes are never edited; a change is a new ``class_version`` with an
``upcast_vN_vN+1`` static method.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from uuid import UUID, uuid4

from eventsourcing.domain import Aggregate
from eventsourcing.utils import get_topic

from coder_es.domain.chain import GENESIS, SEALED_FORMS, event_hash
from coder_es.domain.refs import check_label_name, resolve_ref
from coder_es.errors import UnknownNodeError

if TYPE_CHECKING:
    from coder_es.sealing import Sealing

NodeId = str
JSON = Any

# Node kinds, as the tree projection names them.
USER = "user"
ASSISTANT = "assistant"
TOOL_RESULT = "tool_result"
SUMMARY = "summary"

_BASE_FIELDS = frozenset({"originator_id", "originator_version", "timestamp"})


class Session(Aggregate):
    """A coding-agent session: a tree of conversation nodes plus everything decided on the way."""

    # The sealing of the application this session records into (``CoderApp.sealing``, given by
    # ``start`` and ``CoderApp.get_session``): secrets in an event's fields are sealed and replaced
    # by markers before the event exists, because the chain hash covers its content
    # (coder_es.sealing). A slot, not state: no snapshot holds it, and a copy shares it.
    __slots__ = ("_sealing",)

    class Event(Aggregate.Event):
        prev_hash: str

        def chain_fields(self) -> dict[str, Any]:
            return {k: v for k, v in vars(self).items() if k not in _BASE_FIELDS and k[0] != "_"}

        def chain_hash(self) -> str:
            # A loaded event that was upcast carries the hash of the form it was recorded in.
            recorded = self.__dict__.get("_recorded_hash")
            if recorded is not None:
                return str(recorded)
            return event_hash(
                self.originator_id,
                self.originator_version,
                get_topic(type(self)),
                self.timestamp,
                self.chain_fields(),
            )

        def mutate(self, aggregate: Any) -> Any:
            aggregate = super().mutate(aggregate)
            aggregate.chain_head = self.chain_hash()
            aggregate.node_flags += "1" if isinstance(self, Session.NodeEvent) else "0"
            return aggregate

    class Started(Aggregate.Created, Event):
        workspace: str
        agent: str
        provider: str
        model: str
        title: str
        parent_session: str | None
        parent_node: NodeId | None
        settings: dict[str, Any]

    class NodeEvent(Event):
        """An event that creates a conversation node under ``parent``."""

        parent: NodeId | None

        def apply(self, aggregate: Any) -> None:
            aggregate.head = str(self.originator_version)

    class UserMessageAdded(NodeEvent):
        content: list[dict[str, Any]]

    class ModelResponded(NodeEvent):
        blocks: list[dict[str, Any]]
        stop_reason: str
        usage: dict[str, Any]
        provider: str
        model: str
        request_id: str | None
        request_digest: str | None
        raw_stream_blob: str | None

    class ToolCallRequested(Event):
        node: NodeId
        tool_use_id: str
        name: str
        input: dict[str, Any]

    class PermissionRequested(Event):
        tool_use_id: str
        tool: str
        subject: str
        matched_rule: str | None

    class PermissionDecided(Event):
        tool_use_id: str
        tool: str
        subject: str
        decision: str  # "allow" | "deny"
        scope: str  # "once" | "always"
        pattern: str | None  # for "always": what later calls it covers
        matched_rule: str | None
        decided_by: str  # "rule" | "user" | "client"
        reason: str | None

        def apply(self, aggregate: Any) -> None:
            if self.scope == "always":
                aggregate.always.append(
                    {"tool": self.tool, "pattern": self.pattern, "decision": self.decision}
                )

    class ToolCallCompleted(NodeEvent):
        tool_use_id: str
        name: str
        output: str
        output_blob: str | None
        is_error: bool
        duration_ms: int
        files_changed: list[dict[str, Any]]  # {path, before, after}: content hashes or None

    class FileObserved(Event):
        path: str
        hash: str | None  # None: the file does not exist
        size: int | None
        tool_use_id: str | None

    class EditApplied(Event):
        path: str
        tool_use_id: str | None
        base: str | None  # what the agent saw
        disk: str | None  # what the disk held when the merge ran (the user's side)
        proposed: str | None  # the agent's result applied to its view
        result: str | None  # what the file holds now
        outcome: str  # "direct" | "merged" | "conflict" | "conflict_markers" | "error"
        conflicts: int

    class HeadMoved(Event):
        node: NodeId | None
        previous: NodeId | None
        reason: str  # "checkout" | "rewind" | "fork"

        def apply(self, aggregate: Any) -> None:
            aggregate.head = self.node

    class WorkspaceRestored(Event):
        node: NodeId | None
        entries: list[dict[str, Any]]  # {path, outcome, base, disk, target, result}

    class ContextCompacted(NodeEvent):
        covers: list[NodeId]
        summary: str
        produced_by: str  # "model" | "fallback"

    class NodeLabelled(Event):
        node: NodeId
        name: str

        def apply(self, aggregate: Any) -> None:
            aggregate.labels[self.name] = self.node

    class PermissionsChanged(Event):
        """The user's rules and default from here on (a resume with new rules, a config reload).

        The rules in force are those of the last of these, else the ``Started`` settings'.
        """

        rules: list[dict[str, Any]]  # {tool, pattern, action, source}
        default: str  # "allow" | "ask" | "deny"

    class SettingsChanged(Event):
        """What the session runs with from here on: the agent preset (its tools and permission
        rules), the provider and model, and the request budget that model's window allows (an
        editor's ``session/set_mode`` or model option, ``resume --agent/--model``).

        Those in force are the last of these, else the ``Started`` ones; the aggregate's
        ``agent``, ``provider`` and ``model`` follow, so a resume, a fork and ``sessions`` see
        the session as it is now, and a replay switches at the same point.
        """

        agent: str
        provider: str
        model: str
        context_budget: int

        def apply(self, aggregate: Any) -> None:
            aggregate.agent, aggregate.provider, aggregate.model = (
                self.agent,
                self.provider,
                self.model,
            )

    class HookRan(Event):
        """One hook or plugin ran for ``hook_event`` (``coder_es.hooks``): what it got, what it
        answered and what that did. Recorded before anything depends on it, so a replay serves
        it instead of running the hook (verify) or runs it again and compares (live).

        ``effect``: ``{"decision", "reason", "updated_input", "context", "feedback",
        "blocked", "continue", "stop_reason", "system_message", "suppress_output",
        "files_changed", "failed"}`` (absent keys: no such effect)."""

        hook_event: str  # "PreToolUse", ...
        hook: str  # its identity: "hooks.PreToolUse[0] (/path/config.toml)" or "plugin:NAME"
        digest: str  # sha256 of its command (or the plugin's entry point)
        tool_use_id: str | None
        input: dict[str, Any]  # what it got (in its dialect)
        exit_code: int | None  # None: killed at its timeout, or a plugin
        output: str  # its stdout (a plugin: its JSON answer)
        stderr: str
        duration_ms: int
        effect: dict[str, Any]

    class HooksChanged(Event):
        """The hooks configured from here on (a resume under another configuration); those in
        force are the last of these, else the ``Started`` settings' ``hooks``."""

        hooks: list[dict[str, Any]]

    class Archived(Event):
        """Hidden from the session lists (ACP ``session/delete``, ``coder-es sessions
        --delete``): nothing is removed, the session still opens by its id, and ``sessions
        --deleted`` lists it. ``Unarchived`` brings it back."""

        by: str  # "client" | "user"

    class Unarchived(Event):
        by: str

    class ErrorRecorded(Event):
        kind: str
        message: str
        retryable: bool
        attempt: int

    class RetryScheduled(Event):
        attempt: int
        delay_s: float
        reason: str

    class TurnCancelled(Event):
        node: NodeId | None
        reason: str
        tool_use_ids: list[str]

    class TurnResumed(Event):
        """The user continued the turn cancelled at ``node`` (``run --session S`` with no new
        message): from here the loop runs it again instead of stopping as cancelled."""

        node: NodeId | None

    class PermissionDeferred(Event):
        """A call's permission question was parked instead of asked now (``run --defer``, a
        ``defer`` rule, a hook's ``defer`` or a client): it waits for ``coder-es approve`` /
        ``deny`` from any process. ``source`` says who parked it (``run --defer``, ``rule``,
        ``hook``, ``client``); ``suggested_pattern`` is what an ``--always`` answer covers."""

        tool_use_id: str
        tool: str
        subject: str
        matched_rule: str | None
        reason: str | None
        source: str
        suggested_pattern: str | None

    class TurnParked(Event):
        """The turn stopped with calls waiting for an answer (``PermissionDeferred``); the
        calls that could run did. ``node``: the head it stopped at; ``by``: the process that
        parked it (host, pid, client)."""

        node: NodeId | None
        tool_use_ids: list[str]
        by: dict[str, Any]

    class DeferredAnswered(Event):
        """Who answered a parked question and from where (user, host, pid, client); the
        decision itself is the ``PermissionDecided`` recorded right after it."""

        tool_use_id: str
        decision: str
        by: dict[str, Any]

    class CallScheduled(Event):
        """A ``schedule`` rule's call, recorded with its ``PermissionDeferred``: it runs when its
        ``window`` (``HH:MM-HH:MM`` UTC) opens, at ``due`` (ISO 8601, UTC, from the loop's
        clock); a resume at or after ``due`` allows it (``DeferredAnswered`` by the schedule).
        ``at``: the clock's time when it was scheduled (a replay decides at that time)."""

        tool_use_id: str
        window: str
        due: str
        at: str

    class StepLimitReached(Event):
        """The turn stopped at its step limit (model calls since the user's message) with work
        still asked for; the session waits for the user."""

        node: NodeId | None
        steps: int

    class McpToolsListed(Event):
        """The MCP servers of the session and the tools each offered, as the model will be
        offered them from here on (``coder_es.mcp.catalog``): recorded when a turn first needs
        them and whenever a server's list changes, starts, fails or crashes."""

        servers: list[dict[str, Any]]

    class TaskStarted(Event):
        """A ``task`` call started a subagent: ``child_session``, forked from this session
        (its ``Started`` names this session and the node it was forked from)."""

        tool_use_id: str
        child_session: str
        agent: str
        description: str

    class ModelExchanged(Event):
        """One model request a harness made through the recording proxy, and its answer
        (``coder_es.harness.proxy``): bodies as blobs, no credentials. What deterministic replay
        of a harness session serves."""

        harness: str
        method: str
        path: str
        request_headers: dict[str, str]
        request_blob: str
        status: int
        response_headers: dict[str, str]
        response_blob: str
        duration_ms: int
        error: str | None

    class HarnessRan(Event):
        """One turn of a harness (another agent CLI run as this session): its own session id
        (what the next turn resumes), version, exit and cost as it reported them."""

        harness: str
        kind: str
        harness_session: str | None
        version: str | None
        exit_code: int | None
        duration_ms: int
        cost_usd: float | None
        outcome: str  # "ok" | "error" | "cancelled"
        message: str | None
        # Recorded since deterministic replay of harness sessions (read with getattr: older
        # events lack them): --yes (it chooses the CLI's flags, so its requests), and the
        # harness's own stream as it printed it (a blob; replay decodes it again).
        yes: bool | None = None
        stream_blob: str | None = None

    # ------------------------------------------------------------------ construction

    @classmethod
    def start(
        cls,
        *,
        workspace: str,
        agent: str = "build",
        provider: str = "scripted",
        model: str = "",
        title: str = "",
        parent_session: str | None = None,
        parent_node: NodeId | None = None,
        settings: dict[str, Any] | None = None,
        id: UUID | None = None,
        sealing: Sealing | None = None,
    ) -> Session:
        fields: dict[str, Any] = {
            "workspace": workspace,
            "agent": agent,
            "provider": provider,
            "model": model,
            "title": title,
            "parent_session": parent_session,
            "parent_node": parent_node,
            "settings": dict(settings or {}),
        }
        id = id or uuid4()
        if sealing is not None:
            fields = sealing.redact_kwargs(id, fields)
        session = cls._create(cls.Started, id=id, prev_hash=GENESIS, **fields)
        session._sealing = sealing
        return session

    @property
    def sealing(self) -> Sealing | None:
        """The sealing this session's events are sealed with (None: recorded as given)."""
        return getattr(self, "_sealing", None)

    @sealing.setter
    def sealing(self, sealing: Sealing | None) -> None:
        self._sealing = sealing

    def __init__(
        self,
        *,
        workspace: str,
        agent: str,
        provider: str,
        model: str,
        title: str,
        parent_session: str | None,
        parent_node: NodeId | None,
        settings: dict[str, Any],
        prev_hash: str,
    ) -> None:
        self.workspace = workspace
        self.agent = agent
        self.provider = provider
        self.model = model
        self.title = title
        self.parent_session = parent_session
        self.parent_node = parent_node
        self.settings = settings
        self.head: NodeId | None = None
        # One character per event version, "1" where that event created a node. The aggregate
        # keeps no per-node data (the tree projection does), so loading, copying and
        # snapshotting a session stays cheap however long it grows.
        self.node_flags = ""
        self.labels: dict[str, NodeId] = {}
        self.always: list[dict[str, Any]] = []
        self.chain_head: str = GENESIS

    def trigger_event(self, event_class: Any, **kwargs: Any) -> None:
        # Seal before the event exists: the chain hash covers its content (coder_es.sealing).
        forms: dict[str, str] = {}
        sealing = self.sealing
        if sealing is not None:
            kwargs = sealing.redact_kwargs(self.id, kwargs)
            forms = sealing.take_stored_forms(self.id, kwargs)
        if not forms:
            super().trigger_event(event_class, prev_hash=self.chain_head, **kwargs)
            return
        # A sealed blob this event names is kept in a redacted form only the chain can vouch
        # for: the event carries the sha256 of that form (``sealed_forms``, an extra field
        # that is part of the chain hash and of the stored state; verify compares it). It is
        # set before the event mutates the aggregate, where the chain hash is computed: the
        # library's trigger_event, with that one step added.
        event = event_class(
            originator_id=self.id,
            originator_version=self.version + 1,
            timestamp=event_class.create_timestamp(),
            prev_hash=self.chain_head,
            **kwargs,
        )
        event.__dict__[SEALED_FORMS] = forms
        event.mutate(self)
        self._pending_events.append(event)

    def _new_node(self) -> NodeId:
        return str(self.version + 1)

    # ------------------------------------------------------------------ conversation

    def add_user_message(self, content: str | list[dict[str, Any]]) -> NodeId:
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        node = self._new_node()
        self.trigger_event(self.UserMessageAdded, parent=self.head, content=blocks)
        return node

    def record_model_response(
        self,
        *,
        blocks: list[dict[str, Any]],
        stop_reason: str,
        usage: dict[str, Any],
        provider: str,
        model: str,
        request_id: str | None = None,
        request_digest: str | None = None,
        raw_stream_blob: str | None = None,
    ) -> NodeId:
        node = self._new_node()
        self.trigger_event(
            self.ModelResponded,
            parent=self.head,
            blocks=blocks,
            stop_reason=stop_reason,
            usage=usage,
            provider=provider,
            model=model,
            request_id=request_id,
            request_digest=request_digest,
            raw_stream_blob=raw_stream_blob,
        )
        return node

    def request_tool_call(
        self, *, node: NodeId, tool_use_id: str, name: str, input: dict[str, Any]
    ) -> None:
        self.require_node(node)
        self.trigger_event(
            self.ToolCallRequested, node=node, tool_use_id=tool_use_id, name=name, input=input
        )

    def request_permission(
        self, *, tool_use_id: str, tool: str, subject: str, matched_rule: str | None
    ) -> None:
        self.trigger_event(
            self.PermissionRequested,
            tool_use_id=tool_use_id,
            tool=tool,
            subject=subject,
            matched_rule=matched_rule,
        )

    def decide_permission(
        self,
        *,
        tool_use_id: str,
        tool: str,
        subject: str,
        decision: str,
        scope: str = "once",
        pattern: str | None = None,
        matched_rule: str | None = None,
        decided_by: str = "rule",
        reason: str | None = None,
    ) -> None:
        if decision not in ("allow", "deny"):
            msg = f"permission decision must be 'allow' or 'deny', not {decision!r}"
            raise ValueError(msg)
        if scope not in ("once", "always"):
            msg = f"permission scope must be 'once' or 'always', not {scope!r}"
            raise ValueError(msg)
        self.trigger_event(
            self.PermissionDecided,
            tool_use_id=tool_use_id,
            tool=tool,
            subject=subject,
            decision=decision,
            scope=scope,
            pattern=pattern,
            matched_rule=matched_rule,
            decided_by=decided_by,
            reason=reason,
        )

    def complete_tool_call(
        self,
        *,
        tool_use_id: str,
        name: str,
        output: str,
        output_blob: str | None = None,
        is_error: bool = False,
        duration_ms: int = 0,
        files_changed: list[dict[str, Any]] | None = None,
    ) -> NodeId:
        node = self._new_node()
        self.trigger_event(
            self.ToolCallCompleted,
            parent=self.head,
            tool_use_id=tool_use_id,
            name=name,
            output=output,
            output_blob=output_blob,
            is_error=is_error,
            duration_ms=duration_ms,
            files_changed=list(files_changed or []),
        )
        return node

    def start_task(
        self, *, tool_use_id: str, child_session: str, agent: str, description: str
    ) -> None:
        self.trigger_event(
            self.TaskStarted,
            tool_use_id=tool_use_id,
            child_session=child_session,
            agent=agent,
            description=description,
        )

    def compact_context(self, *, covers: list[NodeId], summary: str, produced_by: str) -> NodeId:
        for node_id in covers:
            self.require_node(node_id)
        node = self._new_node()
        self.trigger_event(
            self.ContextCompacted,
            parent=self.head,
            covers=list(covers),
            summary=summary,
            produced_by=produced_by,
        )
        return node

    def change_permissions(self, *, rules: list[dict[str, Any]], default: str) -> None:
        if default not in ("allow", "ask", "deny"):
            msg = f"the default permission must be allow, ask or deny, not {default!r}"
            raise ValueError(msg)
        for rule in rules:
            if not isinstance(rule, dict) or not {"tool", "action"} <= rule.keys():
                msg = f"a permission rule needs a tool and an action, not {rule!r}"
                raise ValueError(msg)
        self.trigger_event(self.PermissionsChanged, rules=[dict(r) for r in rules], default=default)

    def change_settings(
        self, *, agent: str, provider: str, model: str, context_budget: int
    ) -> None:
        if context_budget < 1:
            msg = f"a context budget must be a positive number of tokens, not {context_budget!r}"
            raise ValueError(msg)
        self.trigger_event(
            self.SettingsChanged,
            agent=agent,
            provider=provider,
            model=model,
            context_budget=context_budget,
        )

    def record_hook_run(
        self,
        *,
        hook_event: str,
        hook: str,
        digest: str,
        tool_use_id: str | None,
        input: dict[str, Any],
        exit_code: int | None,
        output: str,
        stderr: str,
        duration_ms: int,
        effect: dict[str, Any],
    ) -> None:
        self.trigger_event(
            self.HookRan,
            hook_event=hook_event,
            hook=hook,
            digest=digest,
            tool_use_id=tool_use_id,
            input=input,
            exit_code=exit_code,
            output=output,
            stderr=stderr,
            duration_ms=duration_ms,
            effect=effect,
        )

    def change_hooks(self, *, hooks: list[dict[str, Any]]) -> None:
        self.trigger_event(self.HooksChanged, hooks=[dict(h) for h in hooks])

    def archive(self, *, by: str) -> None:
        self.trigger_event(self.Archived, by=by)

    def unarchive(self, *, by: str) -> None:
        self.trigger_event(self.Unarchived, by=by)

    def record_exchange(self, **fields: Any) -> None:
        self.trigger_event(self.ModelExchanged, **fields)

    def record_harness_run(self, **fields: Any) -> None:
        self.trigger_event(self.HarnessRan, **fields)

    # ------------------------------------------------------------------ files

    def observe_file(
        self, *, path: str, hash: str | None, size: int | None, tool_use_id: str | None = None
    ) -> None:
        self.trigger_event(
            self.FileObserved, path=path, hash=hash, size=size, tool_use_id=tool_use_id
        )

    def apply_edit(
        self,
        *,
        path: str,
        base: str | None,
        disk: str | None,
        proposed: str | None,
        result: str | None,
        outcome: str,
        conflicts: int = 0,
        tool_use_id: str | None = None,
    ) -> None:
        self.trigger_event(
            self.EditApplied,
            path=path,
            tool_use_id=tool_use_id,
            base=base,
            disk=disk,
            proposed=proposed,
            result=result,
            outcome=outcome,
            conflicts=conflicts,
        )

    def restore_workspace(self, *, node: NodeId | None, entries: list[dict[str, Any]]) -> None:
        self.trigger_event(self.WorkspaceRestored, node=node, entries=list(entries))

    # ------------------------------------------------------------------ navigation

    def has_node(self, node: NodeId) -> bool:
        if not node.isdigit() or node[0] == "0":
            return False
        index = int(node) - 1
        return 0 <= index < len(self.node_flags) and self.node_flags[index] == "1"

    def node_ids(self) -> list[NodeId]:
        return [str(i + 1) for i, flag in enumerate(self.node_flags) if flag == "1"]

    def require_node(self, node: NodeId | None) -> None:
        if node is not None and not self.has_node(node):
            raise UnknownNodeError(str(self.id), node)

    def move_head(self, node: NodeId | None, *, reason: str) -> None:
        self.require_node(node)
        self.trigger_event(self.HeadMoved, node=node, previous=self.head, reason=reason)

    def label(self, node: NodeId, name: str, *, check_name: bool = True) -> None:
        """Name a node (``check_name=False`` only re-issues a recorded label, as replay does)."""
        self.require_node(node)
        if check_name:
            check_label_name(name)
        self.trigger_event(self.NodeLabelled, node=node, name=name)

    # ------------------------------------------------------------------ errors

    def record_error(
        self, *, kind: str, message: str, retryable: bool = False, attempt: int = 0
    ) -> None:
        self.trigger_event(
            self.ErrorRecorded, kind=kind, message=message, retryable=retryable, attempt=attempt
        )

    def record_retry(self, *, attempt: int, delay_s: float, reason: str) -> None:
        self.trigger_event(self.RetryScheduled, attempt=attempt, delay_s=delay_s, reason=reason)

    def cancel(self, *, reason: str, tool_use_ids: list[str] | None = None) -> None:
        self.trigger_event(
            self.TurnCancelled, node=self.head, reason=reason, tool_use_ids=list(tool_use_ids or [])
        )

    def resume_turn(self) -> None:
        self.trigger_event(self.TurnResumed, node=self.head)

    def defer_permission(
        self,
        *,
        tool_use_id: str,
        tool: str,
        subject: str,
        matched_rule: str | None,
        reason: str | None,
        source: str,
        suggested_pattern: str | None,
    ) -> None:
        self.trigger_event(
            self.PermissionDeferred,
            tool_use_id=tool_use_id,
            tool=tool,
            subject=subject,
            matched_rule=matched_rule,
            reason=reason,
            source=source,
            suggested_pattern=suggested_pattern,
        )

    def park_turn(self, *, tool_use_ids: list[str], by: dict[str, Any]) -> None:
        self.trigger_event(self.TurnParked, node=self.head, tool_use_ids=tool_use_ids, by=by)

    def answer_deferred(self, *, tool_use_id: str, decision: str, by: dict[str, Any]) -> None:
        self.trigger_event(self.DeferredAnswered, tool_use_id=tool_use_id, decision=decision, by=by)

    def schedule_call(self, *, tool_use_id: str, window: str, due: str, at: str) -> None:
        self.trigger_event(
            self.CallScheduled, tool_use_id=tool_use_id, window=window, due=due, at=at
        )

    def stop_at_step_limit(self, *, steps: int) -> None:
        self.trigger_event(self.StepLimitReached, node=self.head, steps=steps)

    def list_mcp_tools(self, *, servers: list[dict[str, Any]]) -> None:
        self.trigger_event(self.McpToolsListed, servers=servers)

    # ------------------------------------------------------------------ queries

    def resolve_node(self, ref: str) -> NodeId:
        """``HEAD``, a node id, a label, or a unique prefix of a node id (``domain.refs``)."""
        if self.has_node(ref):
            return ref
        return resolve_ref(
            ref, session=str(self.id), nodes=self.node_ids(), labels=self.labels, head=self.head
        )
