"""The OpenTelemetry export: OTLP/JSON spans following the GenAI semantic conventions.

One ``ExportTraceServiceRequest`` on one line, the shape an OpenTelemetry collector's
``otlpjsonfile`` receiver reads. One trace per session:

- ``invoke_agent {agent}`` (INTERNAL) per turn: from a user message to the next one;
- ``chat {model}`` (CLIENT) per model response, child of its turn, with ``gen_ai.usage.*``;
- ``execute_tool {tool}`` (INTERNAL) per tool call (keyed by ``tool_use_id``), child of its turn;
  permission requests and decisions are span events on it (``coder_es.permission.*``), edits too;
- errors, retries, cancellations and head moves are span events on the turn.

Attribute names are those of the GenAI conventions (gen_ai.operation.name, gen_ai.provider.name
with the older gen_ai.system beside it, gen_ai.request.model, gen_ai.response.model,
gen_ai.response.id, gen_ai.response.finish_reasons, gen_ai.usage.input_tokens /
output_tokens, gen_ai.conversation.id, gen_ai.agent.name, gen_ai.tool.name, gen_ai.tool.call.id,
gen_ai.tool.type, error.type); what the conventions do not cover is under ``coder_es.*``.

Ids are derived from the session id and event versions (sha256), so the same events always
give the same trace. As OTLP/JSON requires, trace and span ids are hex strings and times are
decimal strings of nanoseconds since the epoch.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from coder_es.audit.export import PreparedExport, tool_versions
from coder_es.audit.records import AuditEvent
from coder_es.domain.chain import canonical_json

KIND_INTERNAL = 1
KIND_CLIENT = 3
STATUS_ERROR = 2


def trace_id(session: str) -> str:
    return hashlib.sha256(f"trace:{session}".encode()).hexdigest()[:32]


def span_id(session: str, key: str) -> str:
    return hashlib.sha256(f"span:{session}:{key}".encode()).hexdigest()[:16]


def _nanos(timestamp: str) -> str:
    moment = datetime.fromisoformat(timestamp)
    whole = int(moment.timestamp())
    return str(whole * 1_000_000_000 + moment.microsecond * 1000)


def _value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, (list, tuple)):
        return {"arrayValue": {"values": [_value(v) for v in value]}}
    if isinstance(value, dict):
        return {"stringValue": canonical_json(value)}
    return {"stringValue": "" if value is None else str(value)}


def _attrs(pairs: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": _value(v)} for k, v in pairs.items() if v is not None]


@dataclass
class _Span:
    key: str
    name: str
    kind: int
    start: str
    end: str
    parent: str | None
    attributes: dict[str, Any]
    events: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    order: int = 0

    def to_json(self, session: str) -> dict[str, Any]:
        out: dict[str, Any] = {
            "traceId": trace_id(session),
            "spanId": span_id(session, self.key),
            "name": self.name,
            "kind": self.kind,
            "startTimeUnixNano": _nanos(self.start),
            "endTimeUnixNano": _nanos(self.end),
            "attributes": _attrs(self.attributes),
            "events": self.events,
        }
        if self.parent is not None:
            out["parentSpanId"] = span_id(session, self.parent)
        if self.error is not None:
            out["status"] = {"code": STATUS_ERROR, "message": self.error}
        return out


def _usage(usage: Any, *names: str) -> int | None:
    if not isinstance(usage, dict):
        return None
    for name in names:
        if isinstance(usage.get(name), int):
            return int(usage[name])
    return None


def _span_event(e: AuditEvent, name: str, attributes: dict[str, Any]) -> dict[str, Any]:
    return {
        "timeUnixNano": _nanos(e.timestamp),
        "name": name,
        "attributes": _attrs({"coder_es.event.version": e.version, **attributes}),
    }


def build_spans(prepared: PreparedExport) -> list[_Span]:
    session = prepared.session
    started = prepared.started()
    agent = started.get("agent", "agent")
    spans: list[_Span] = []
    turn: _Span | None = None
    tools: dict[str, _Span] = {}
    last_time = prepared.events[0].timestamp if prepared.events else ""

    def open_turn(e: AuditEvent) -> _Span:
        span = _Span(
            key=f"turn:{e.version}",
            name=f"invoke_agent {agent}",
            kind=KIND_INTERNAL,
            start=e.timestamp,
            end=e.timestamp,
            parent=None,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": agent,
                "gen_ai.provider.name": started.get("provider"),
                "gen_ai.system": started.get("provider"),
                "gen_ai.request.model": started.get("model") or None,
                "gen_ai.conversation.id": session,
                "coder_es.node.id": str(e.version),
            },
            order=e.version,
        )
        spans.append(span)
        return span

    for e in prepared.events:
        f = e.fields
        if e.kind == "Started":
            last_time = e.timestamp
            continue
        if e.kind == "UserMessageAdded" or turn is None:
            turn = open_turn(e)
        turn.end = max(turn.end, e.timestamp)
        if e.kind == "ModelResponded":
            usage = f.get("usage")
            spans.append(
                _Span(
                    key=f"chat:{e.version}",
                    name=f"chat {f.get('model')}",
                    kind=KIND_CLIENT,
                    start=min(last_time, e.timestamp),
                    end=e.timestamp,
                    parent=turn.key,
                    attributes={
                        "gen_ai.operation.name": "chat",
                        "gen_ai.provider.name": f.get("provider"),
                        "gen_ai.system": f.get("provider"),
                        "gen_ai.request.model": f.get("model"),
                        "gen_ai.response.model": f.get("model"),
                        "gen_ai.response.id": f.get("request_id"),
                        "gen_ai.response.finish_reasons": [str(f.get("stop_reason"))],
                        "gen_ai.usage.input_tokens": _usage(usage, "input_tokens", "prompt_tokens"),
                        "gen_ai.usage.output_tokens": _usage(
                            usage, "output_tokens", "completion_tokens"
                        ),
                        "gen_ai.conversation.id": session,
                        "coder_es.node.id": str(e.version),
                    },
                    order=e.version,
                )
            )
        elif e.kind in (
            "ToolCallRequested",
            "PermissionRequested",
            "PermissionDecided",
            "ToolCallCompleted",
        ):
            call_id = str(f.get("tool_use_id"))
            tool = tools.get(call_id)
            name = f.get("name") or f.get("tool")
            if tool is None:
                tool = tools[call_id] = _Span(
                    key=f"tool:{call_id}",
                    name=f"execute_tool {name}",
                    kind=KIND_INTERNAL,
                    start=e.timestamp,
                    end=e.timestamp,
                    parent=turn.key,
                    attributes={
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.tool.name": name,
                        "gen_ai.tool.call.id": call_id,
                        "gen_ai.tool.type": "function",
                        "gen_ai.conversation.id": session,
                    },
                    order=e.version,
                )
                spans.append(tool)
            tool.end = max(tool.end, e.timestamp)
            if e.kind == "PermissionRequested":
                tool.events.append(
                    _span_event(
                        e,
                        "coder_es.permission.requested",
                        {
                            "coder_es.permission.subject": f.get("subject"),
                            "coder_es.permission.rule": f.get("matched_rule"),
                        },
                    )
                )
            elif e.kind == "PermissionDecided":
                tool.events.append(
                    _span_event(
                        e,
                        "coder_es.permission.decided",
                        {
                            "coder_es.permission.decision": f.get("decision"),
                            "coder_es.permission.scope": f.get("scope"),
                            "coder_es.permission.decided_by": f.get("decided_by"),
                            "coder_es.permission.subject": f.get("subject"),
                            "coder_es.permission.rule": f.get("matched_rule"),
                            "coder_es.permission.reason": f.get("reason"),
                        },
                    )
                )
                if f.get("decision") == "deny":
                    tool.attributes["coder_es.permission.denied"] = True
            elif e.kind == "ToolCallCompleted":
                tool.attributes["coder_es.tool.duration_ms"] = f.get("duration_ms")
                tool.attributes["coder_es.node.id"] = str(e.version)
                changes = f.get("files_changed") or []
                changed = [c.get("path") for c in changes if isinstance(c, dict)]
                if changed:
                    tool.attributes["coder_es.files_changed"] = [str(p) for p in changed]
                if f.get("is_error"):
                    tool.error = "tool reported an error"
                    tool.attributes["error.type"] = "tool_error"
        elif e.kind in ("EditApplied", "FileObserved") and str(f.get("tool_use_id")) in tools:
            tools[str(f.get("tool_use_id"))].events.append(
                _span_event(
                    e,
                    f"coder_es.{'edit' if e.kind == 'EditApplied' else 'file'}",
                    {
                        "coder_es.file.path": f.get("path"),
                        "coder_es.edit.outcome": f.get("outcome"),
                    },
                )
            )
        else:
            turn.events.append(
                _span_event(
                    e,
                    f"coder_es.{e.kind}",
                    {f"coder_es.{k}": v for k, v in sorted(f.items()) if k != "prev_hash"},
                )
            )
            if e.kind == "ErrorRecorded":
                turn.error = str(f.get("message"))
        last_time = e.timestamp
    return spans


def render_otel(prepared: PreparedExport) -> bytes:
    spans = build_spans(prepared)
    started = prepared.started()
    resource = {
        "service.name": "coder-es",
        "service.version": tool_versions()["coder-es"],
        "gen_ai.conversation.id": prepared.session,
        "coder_es.session.id": prepared.session,
        "coder_es.session.workspace": started.get("workspace"),
        "coder_es.session.head_version": prepared.head_version,
        "coder_es.session.head_hash": prepared.head_hash,
        "coder_es.export.filters": canonical_json(prepared.filters) if prepared.filters else None,
        "coder_es.export.redactions": (
            canonical_json(prepared.redactions) if prepared.redactions else None
        ),
    }
    request = {
        "resourceSpans": [
            {
                "resource": {"attributes": _attrs(resource)},
                "scopeSpans": [
                    {
                        "scope": {"name": "coder_es.audit", "version": tool_versions()["coder-es"]},
                        "spans": [s.to_json(prepared.session) for s in spans],
                    }
                ],
            }
        ]
    }
    return (canonical_json(request) + "\n").encode()
