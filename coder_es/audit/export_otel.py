"""The OpenTelemetry export: OTLP/JSON spans following the GenAI semantic conventions.

One ``ExportTraceServiceRequest`` on one line, the shape an OpenTelemetry collector's
``otlpjsonfile`` receiver reads. One trace per session; the spans are those of
``coder_es.audit.span_tree`` (the live exporter in ``coder_es.telemetry`` sends the same tree):
``invoke_agent`` per turn, ``chat`` per model response with ``gen_ai.usage.*``, ``execute_tool``
per tool call with permission decisions as span events. The subagents' sessions are in the same
trace, each a resource of its own, their turns children of the ``execute_tool task`` span of the
call that started them.

Ids are derived from the session id and event versions (sha256), so the same events always
give the same trace. As OTLP/JSON requires, trace and span ids are hex strings and times are
decimal strings of nanoseconds since the epoch.
"""

from __future__ import annotations

from typing import Any

from coder_es.audit.prepared import ChildExport, PreparedExport, tool_versions
from coder_es.audit.span_tree import (
    STATUS_ERROR,
    SpanEvent,
    SpanRecord,
    build_spans,
    file_export,
    nanos,
    span_id,
    trace_id,
)
from coder_es.domain.chain import canonical_json


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


def _event_json(event: SpanEvent) -> dict[str, Any]:
    return {
        "timeUnixNano": str(nanos(event.timestamp)),
        "name": event.name,
        "attributes": _attrs(event.attributes),
    }


def span_json(
    session: str, span: SpanRecord, trace: str | None = None, under: str | None = None
) -> dict[str, Any]:
    """``trace``: the trace it belongs to (default: the session's own); ``under``: the span id
    its top-level spans hang from (a subagent's turns hang from the parent's ``task`` call)."""
    out: dict[str, Any] = {
        "traceId": trace or trace_id(session),
        "spanId": span_id(session, span.key),
        "name": span.name,
        "kind": span.kind,
        "startTimeUnixNano": str(nanos(span.start)),
        "endTimeUnixNano": str(nanos(span.end)),
        "attributes": _attrs(span.attributes),
        "events": [_event_json(e) for e in span.events],
    }
    if span.parent is not None:
        out["parentSpanId"] = span_id(session, span.parent)
    elif under is not None:
        out["parentSpanId"] = under
    if span.error is not None:
        out["status"] = {"code": STATUS_ERROR, "message": span.error}
    return out


def _task_spans(session: str, spans: list[SpanRecord]) -> dict[str, str]:
    """The span id of each ``task`` call of a session, by its tool_use id (a later call with a
    reused id wins: a subagent is started by the last call of that id before it)."""
    return {
        str(s.attributes.get("gen_ai.tool.call.id")): span_id(session, s.key)
        for s in spans
        if s.name == "execute_tool task"
    }


def _resource_spans(
    prepared: PreparedExport,
    trace: str,
    link: ChildExport | None = None,
    tasks: dict[str, dict[str, str]] | None = None,
) -> dict[str, Any]:
    """``tasks`` collects each exported session's task span ids (``_task_spans``), so a
    subagent's turns find the span of the call that started them."""
    started = prepared.started()
    capture = prepared.capture_content
    spans = build_spans(prepared.session, prepared.events, file_export(capture), started)
    if tasks is not None:
        tasks[prepared.session] = _task_spans(prepared.session, spans)
    under = None
    if link is not None and tasks is not None:
        under = tasks.get(link.parent_session, {}).get(link.tool_use_id)
    resource = {
        "service.name": "coder-es",
        "service.version": tool_versions()["coder-es"],
        "gen_ai.conversation.id": prepared.session,
        "coder_es.session.id": prepared.session,
        # A path: content, like every path the spans carry (issue 29).
        "coder_es.session.workspace": started.get("workspace") if capture else None,
        "coder_es.session.head_version": prepared.head_version,
        "coder_es.session.head_hash": prepared.head_hash,
        "coder_es.session.parent_id": None if link is None else link.parent_session,
        "coder_es.task.call_id": None if link is None else link.tool_use_id,
        "gen_ai.agent.name": None if link is None else link.agent,
        "coder_es.export.filters": canonical_json(prepared.filters) if prepared.filters else None,
        "coder_es.export.redactions": (
            canonical_json(prepared.redactions) if prepared.redactions else None
        ),
    }
    return {
        "resource": {"attributes": _attrs(resource)},
        "scopeSpans": [
            {
                "scope": {"name": "coder_es.audit", "version": tool_versions()["coder-es"]},
                "spans": [span_json(prepared.session, s, trace, under) for s in spans],
            }
        ],
    }


def render_otel(prepared: PreparedExport) -> bytes:
    """One trace for the whole tree of work: each subagent's session is a resource of its
    own whose turns hang from the parent's ``execute_tool task`` span."""
    trace = trace_id(prepared.session)
    tasks: dict[str, dict[str, str]] = {}
    resources = [_resource_spans(prepared, trace, tasks=tasks)]
    for child in prepared.descendants():  # a parent comes before its children
        if child.prepared is not None:
            resources.append(_resource_spans(child.prepared, trace, child, tasks))
    return (canonical_json({"resourceSpans": resources}) + "\n").encode()
