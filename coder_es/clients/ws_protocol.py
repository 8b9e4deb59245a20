"""The WebSocket protocol of ``coder-es serve`` (version 1): message shapes and validation.

Every frame is one JSON object with a ``type``. Client messages may carry an ``id``; replies to
them carry it back as ``re``. Server messages that belong to the session's stream (everything a
turn produces) carry ``seq``, consecutive per session from 1; they are kept in a bounded buffer
and re-sent on resume, so a client that reconnects with ``last_seq`` misses nothing. Replies to
requests (``history``, ``state``, ``moved``, request errors) go only to the connection that
asked. The full reference is docs/clients.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from coder_es.agent import updates as up
from coder_es.clients.errors import ClientError
from coder_es.permissions.policy import PermissionAnswer

PROTOCOL_VERSION = 1

CLIENT_TYPES = (
    "send_message",
    "tool_decision",
    "answer_parked",
    "cancel",
    "get_history",
    "get_state",
    "fork",
    "switch",
    "rewind",
    "search",
)


@dataclass(frozen=True)
class ClientMessage:
    type: str
    id: Any = None
    fields: dict[str, Any] = field(default_factory=dict)

    def str_field(self, name: str, *, required: bool = True) -> str | None:
        value = self.fields.get(name)
        if value is None and not required:
            return None
        if not isinstance(value, str) or not value.strip():
            raise ClientError(f"{self.type} needs a non-empty string {name!r}")
        return value

    def bool_field(self, name: str, default: bool) -> bool:
        value = self.fields.get(name, default)
        if not isinstance(value, bool):
            raise ClientError(f"{self.type}: {name!r} must be true or false")
        return value


def parse_client_message(raw: str | bytes) -> ClientMessage:
    """Decode and check one frame; ``ClientError`` says what is wrong with it."""
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise ClientError(f"a message must be a JSON object: {e}") from e
    except RecursionError:
        # Thousands of nested brackets exhaust the decoder's stack: a bad frame, not a crash.
        raise ClientError("a message must be a JSON object: nested too deeply") from None
    if not isinstance(data, dict):
        raise ClientError("a message must be a JSON object")
    re = data.get("id")
    kind = data.get("type")
    if kind not in CLIENT_TYPES:
        raise ClientError(
            f"unknown message type {kind!r}; expected one of {', '.join(CLIENT_TYPES)}",
            code="unknown_type",
            re=re,
        )
    fields = {k: v for k, v in data.items() if k not in ("type", "id")}
    message = ClientMessage(kind, re, fields)
    try:
        _check(message)
    except ClientError as e:
        # docs/clients.md: a refused request still names the request it refuses.
        e.re = re
        raise
    return message


def _check(m: ClientMessage) -> None:
    if m.type == "send_message":
        m.str_field("text")
    elif m.type == "tool_decision":
        m.str_field("tool_use_id")
        decision_answer(m)
    elif m.type == "answer_parked":
        parked_answer(m)
    elif m.type in ("switch", "rewind"):
        m.str_field("node")
    elif m.type == "fork":
        m.str_field("node", required=False)
        m.bool_field("new_session", False)
    if m.type == "rewind" and not (
        m.bool_field("conversation", True) or m.bool_field("files", True)
    ):
        raise ClientError("rewind needs the conversation, the files, or both")


def decision_answer(m: ClientMessage) -> PermissionAnswer:
    """A ``tool_decision`` as the permission layer's answer (recorded with decided_by=client)."""
    decision = m.fields.get("decision")
    scope = m.fields.get("scope", "once")
    if decision not in ("allow", "deny"):
        raise ClientError('tool_decision: \'decision\' must be "allow" or "deny"')
    if scope not in ("once", "always"):
        raise ClientError('tool_decision: \'scope\' must be "once" or "always"')
    pattern = m.str_field("pattern", required=False)
    reason = m.fields.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise ClientError("tool_decision: 'reason' must be a string")
    if decision == "deny" and not reason:
        reason = "rejected by the user"
    return PermissionAnswer(decision, scope, pattern, reason, decided_by="client")


@dataclass(frozen=True)
class ParkedAnswer:
    """An ``answer_parked``: the answer to questions a parked turn waits for (issue 34), as
    ``coder-es approve`` / ``deny`` give it; ``calls`` empty: every waiting call."""

    calls: tuple[str, ...]
    decision: str
    always: bool
    message: str | None
    continue_turn: bool


def parked_answer(m: ClientMessage) -> ParkedAnswer:
    calls = m.fields.get("tool_use_ids", [])
    if not isinstance(calls, list) or not all(isinstance(c, str) and c for c in calls):
        raise ClientError("answer_parked: 'tool_use_ids' must be a list of call ids")
    decision = m.fields.get("decision")
    if decision not in ("allow", "deny"):
        raise ClientError('answer_parked: \'decision\' must be "allow" or "deny"')
    scope = m.fields.get("scope", "once")
    if scope not in ("once", "always"):
        raise ClientError('answer_parked: \'scope\' must be "once" or "always"')
    if scope == "always" and decision == "deny":
        raise ClientError("answer_parked: a deny is once")
    reason = m.fields.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise ClientError("answer_parked: 'reason' must be a string")
    return ParkedAnswer(
        tuple(calls), decision, scope == "always", reason, m.bool_field("continue", True)
    )


# ---------------------------------------------------------------------- server messages


def message(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, **fields}


def error(message_text: str, *, code: str, fatal: bool = False, re: Any = None) -> dict[str, Any]:
    out = message("error", code=code, message=message_text, fatal=fatal)
    if re is not None:
        out["re"] = re
    return out


def awaiting_approval(q: up.PermissionRequired) -> dict[str, Any]:
    return message(
        "awaiting_approval",
        tool_use_id=q.tool_use_id,
        tool=q.tool,
        subject=q.subject,
        input=q.input,
        reason=q.reason,
        matched_rule=q.matched_rule,
        suggested_pattern=q.suggested_pattern,
    )


def tool_request(tool_use_id: str, name: str, inp: dict[str, Any], node: str) -> dict[str, Any]:
    return message("tool_request", tool_use_id=tool_use_id, name=name, input=inp, node=node)


def add_usage(total: dict[str, int], usage: dict[str, Any]) -> None:
    for key, value in usage.items():
        if isinstance(value, int):
            total[key] = total.get(key, 0) + value


def from_update(update: up.Update, turn_usage: dict[str, int]) -> dict[str, Any] | None:
    """The stream message for one service update (None: nothing to send for it).

    ``PermissionRequired`` and ``ModelResponse``'s tool calls need the session's context and are
    built by the server (``awaiting_approval``, ``tool_request``)."""
    if isinstance(update, up.TextDelta):
        return message("text_delta", text=update.text, index=update.index)
    if isinstance(update, up.ThinkingDelta):
        return message("thinking_delta", text=update.text, index=update.index)
    if isinstance(update, up.UserMessage):
        return message("user_message", node=update.node, text=update.text)
    if isinstance(update, up.ModelResponse):
        add_usage(turn_usage, update.usage)
        return message(
            "model_response",
            node=update.node,
            step=update.step,
            stop_reason=update.stop_reason,
            tool_calls=update.tool_calls,
            usage=update.usage,
        )
    if isinstance(update, up.UsageUpdate):
        return message("usage", usage=update.usage)
    if isinstance(update, up.PermissionDecision):
        return message(
            "tool_decided",
            tool_use_id=update.tool_use_id,
            tool=update.tool,
            decision=update.decision,
            scope=update.scope,
            decided_by=update.decided_by,
            reason=update.reason,
        )
    if isinstance(update, up.ToolStarted):
        return message(
            "tool_started", tool_use_id=update.tool_use_id, name=update.name, input=update.input
        )
    if isinstance(update, up.ToolProgress):
        return message("tool_delta", tool_use_id=update.tool_use_id, text=update.text)
    if isinstance(update, up.ToolCompleted):
        return message(
            "tool_error" if update.is_error else "tool_completed",
            tool_use_id=update.tool_use_id,
            name=update.name,
            output=update.output,
            duration_ms=update.duration_ms,
            truncated=update.truncated,
            files_changed=list(update.files_changed),
        )
    if isinstance(update, up.Retry):
        return message(
            "retrying", attempt=update.attempt, delay_s=update.delay_s, reason=update.reason
        )
    if isinstance(update, up.Error):
        out = error(update.message, code="model", fatal=False)
        out.update(kind=update.kind, retryable=update.retryable)
        return out
    if isinstance(update, up.TurnCancelled):
        return message("cancelled", reason=update.reason, tool_use_ids=list(update.tool_use_ids))
    if isinstance(update, up.HookRan):
        return message(
            "hook_ran",
            event=update.event,
            hook=update.hook,
            tool_use_id=update.tool_use_id,
            exit_code=update.exit_code,
            duration_ms=update.duration_ms,
            effect=dict(update.effect),
        )
    if isinstance(update, up.PermissionDeferred):
        return message(
            "tool_deferred",
            tool_use_id=update.tool_use_id,
            tool=update.tool,
            subject=update.subject,
            source=update.source,
            matched_rule=update.matched_rule,
            reason=update.reason,
        )
    if isinstance(update, up.TurnWaiting):
        return message("waiting", tool_use_ids=list(update.tool_use_ids))
    if isinstance(update, up.TurnEnded):
        return message(
            "finished",
            reason=update.reason,
            steps=update.steps,
            head=update.head,
            usage=dict(turn_usage),
        )
    return None
