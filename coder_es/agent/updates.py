"""What a running session tells its client: frozen values, each with a JSON form (``to_dict``).

The CLI renders them, ``run --json`` prints one per line, and the ACP / WebSocket servers
forward them. ``type`` is the stable name a client switches on.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar


@dataclass(frozen=True)
class Update:
    type: ClassVar[str] = "update"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out


@dataclass(frozen=True)
class SessionOpened(Update):
    type: ClassVar[str] = "session"
    session_id: str
    resumed: bool
    agent: str
    provider: str
    model: str
    workspace: str


@dataclass(frozen=True)
class UserMessage(Update):
    type: ClassVar[str] = "user_message"
    node: str
    text: str


@dataclass(frozen=True)
class TextDelta(Update):
    type: ClassVar[str] = "text_delta"
    text: str
    index: int = 0


@dataclass(frozen=True)
class ThinkingDelta(Update):
    type: ClassVar[str] = "thinking_delta"
    text: str
    index: int = 0


@dataclass(frozen=True)
class ModelResponse(Update):
    """A model turn was recorded (``node`` is its node id)."""

    type: ClassVar[str] = "model_response"
    node: str
    step: int
    stop_reason: str
    text: str
    tool_calls: int
    usage: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class UsageUpdate(Update):
    type: ClassVar[str] = "usage"
    usage: dict[str, int]


@dataclass(frozen=True)
class PermissionRequired(Update):
    """Someone must answer (``SessionHandle.answer``) before the call can run."""

    type: ClassVar[str] = "permission_required"
    tool_use_id: str
    tool: str
    subject: str
    input: dict[str, Any]
    matched_rule: str
    reason: str
    suggested_pattern: str
    # The subagent (child session) whose call this is; None: the session's own.
    session: str | None = None


@dataclass(frozen=True)
class PermissionDecision(Update):
    type: ClassVar[str] = "permission_decided"
    tool_use_id: str
    tool: str
    subject: str
    decision: str
    scope: str
    decided_by: str
    matched_rule: str | None
    reason: str | None
    session: str | None = None


@dataclass(frozen=True)
class PermissionDeferred(Update):
    """A call's question was parked: it waits for ``coder-es approve`` / ``deny``."""

    type: ClassVar[str] = "permission_deferred"
    tool_use_id: str
    tool: str
    subject: str
    source: str
    matched_rule: str | None
    reason: str | None


@dataclass(frozen=True)
class TurnWaiting(Update):
    """The turn stopped with these calls waiting for an answer from any process."""

    type: ClassVar[str] = "turn_waiting"
    session_id: str
    tool_use_ids: tuple[str, ...]


@dataclass(frozen=True)
class ToolStarted(Update):
    type: ClassVar[str] = "tool_started"
    tool_use_id: str
    name: str
    input: dict[str, Any]


@dataclass(frozen=True)
class ToolProgress(Update):
    type: ClassVar[str] = "tool_progress"
    tool_use_id: str
    text: str


@dataclass(frozen=True)
class ToolCompleted(Update):
    type: ClassVar[str] = "tool_completed"
    tool_use_id: str
    name: str
    output: str
    is_error: bool
    duration_ms: int
    truncated: bool
    files_changed: tuple[dict[str, Any], ...] = ()
    # A ``task`` result: {"child_session": id, "agent": name}.
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Retry(Update):
    type: ClassVar[str] = "retry"
    attempt: int
    delay_s: float
    reason: str


@dataclass(frozen=True)
class Error(Update):
    type: ClassVar[str] = "error"
    kind: str
    message: str
    retryable: bool


@dataclass(frozen=True)
class TurnCancelled(Update):
    type: ClassVar[str] = "cancelled"
    reason: str
    tool_use_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class TurnEnded(Update):
    """The last update of a turn. ``reason``: a stop reason, "max_steps", "cancelled", "error"."""

    type: ClassVar[str] = "turn_ended"
    reason: str
    steps: int
    head: str | None


@dataclass(frozen=True)
class HookRan(Update):
    """A hook or plugin ran (recorded as ``HookRan``): what it was and what it did."""

    type: ClassVar[str] = "hook"
    event: str
    hook: str
    tool_use_id: str | None
    exit_code: int | None
    duration_ms: int
    effect: dict[str, Any] = field(default_factory=dict)
