"""The span tree of a session, built from its events one at a time.

One builder serves both OpenTelemetry exports: the OTLP/JSON file (``export_otel``) feeds it a
whole recorded session; the live exporter (``coder_es.telemetry``) feeds it each event as it is
saved and sends every span the moment the builder reports it finished. The tree is a function
of the events alone (ids from the session id and event versions, times from event timestamps),
so the live spans and the file export of the same session agree span for span.

- ``invoke_agent {agent}`` (INTERNAL) per turn: from a user message to the next one (the turn is
  finished when the next user message arrives, or when the feed ends);
- ``chat {model}`` (CLIENT) per model response, child of its turn, finished at the response;
- ``execute_tool {tool}`` (INTERNAL) per tool call (matched by ``tool_use_id``, named by the event
  that opened it), child of its turn;
  permission requests and decisions and the edits it made are span events on it; finished at the
  next model response after the call completed (edits are recorded after the completion);
- errors, retries, cancellations and head moves are span events on the turn.

Conventions: ``Semconv`` says which GenAI semantic-conventions names are written (the pinned
v1.36.0 names, the latest experimental ones, or both), and whether message content is captured.
Content is only ever the stored form of an event: what the redactor left, markers included.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any

from coder_es.audit.records import AuditEvent

KIND_INTERNAL = 1
KIND_CLIENT = 3
STATUS_ERROR = 2

OLD_SEMCONV = "1.36.0"
"""The GenAI semantic-conventions version written by default (``gen_ai.system``; captured
content as span events ``gen_ai.user.message`` / ``gen_ai.choice`` / ``gen_ai.tool.message``)."""
LATEST_SEMCONV = "1.41.0"
"""The version written with ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``
(``gen_ai.provider.name``; content as ``gen_ai.input.messages`` / ``gen_ai.output.messages`` /
``gen_ai.tool.call.arguments`` / ``gen_ai.tool.call.result`` attributes)."""


CONTENT_FIELDS = frozenset({"content", "summary", "blocks", "input", "output"})
"""Fields of other events that hold conversation text (kept for callers naming them)."""

METADATA_FIELDS = frozenset(
    {
        "agent", "attempt", "by", "child_session", "conflicts", "context_budget", "covers",
        "decided_by", "decision", "default", "delay_s", "duration_ms", "is_error", "kind",
        "model", "node", "outcome", "parent", "previous", "produced_by", "provider",
        "retryable", "scope", "steps", "stop_reason", "tool", "tool_use_id", "tool_use_ids",
    }
)  # fmt: skip
"""The fields of other events shown as turn span events when content is NOT captured: an
allow-list of fields that carry no text of the session (ids, counts, enumerations). Anything
else (a command line, a path, a reason quoting either, a label, a prompt) may carry the user's or
the agent's content, and follows the content opt-in
(``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``), in live telemetry and in the file
export alike (issue 29)."""


@dataclass(frozen=True)
class Semconv:
    old: bool = True
    latest: bool = True
    capture_content: bool = False
    """Content opt-in: conversation text, tool arguments and results, and every attribute
    that carries content (permission subjects and reasons, paths, other events' text fields)."""
    all_event_fields: bool = False
    """The file export's audit view: every event, with every field content capture allows."""

    @property
    def version(self) -> str:
        return LATEST_SEMCONV if self.latest and not self.old else OLD_SEMCONV


FILE_EXPORT = Semconv(old=True, latest=True, capture_content=False, all_event_fields=True)
"""The file export writes both provider names and, by default, no content (the same opt-in as
live telemetry: ``export --format otel`` with capture turns it on, ``file_export(capture)``)."""


def file_export(capture_content: bool) -> Semconv:
    return Semconv(old=True, latest=True, capture_content=capture_content, all_event_fields=True)


def trace_id(session: str) -> str:
    return hashlib.sha256(f"trace:{session}".encode()).hexdigest()[:32]


def span_number(session: str, key: str) -> int:
    """The span id of ``key`` in ``session``, as the number OpenTelemetry's SDK takes."""
    return int.from_bytes(hashlib.sha256(f"span:{session}:{key}".encode()).digest()[:8], "big")


def span_id(session: str, key: str) -> str:
    return f"{span_number(session, key):016x}"


@lru_cache(maxsize=256)
def nanos(timestamp: str) -> int:
    # Kept: a span's start, end and events, and the metrics, read the same few timestamps.
    moment = datetime.fromisoformat(timestamp)
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000


@dataclass(frozen=True)
class SpanEvent:
    name: str
    timestamp: str
    attributes: dict[str, Any]


@dataclass
class SpanRecord:
    """One span while it is built; ``key`` names it within the session (its id derives from it)."""

    key: str
    name: str
    kind: int
    start: str
    end: str
    parent: str | None
    attributes: dict[str, Any]
    events: list[SpanEvent] = field(default_factory=list)
    error: str | None = None
    order: int = 0


def _usage(usage: Any, *names: str) -> int | None:
    if not isinstance(usage, dict):
        return None
    for name in names:
        if isinstance(usage.get(name), int):
            return int(usage[name])
    return None


def input_tokens(usage: Any) -> int | None:
    return _usage(usage, "input_tokens", "prompt_tokens")


def output_tokens(usage: Any) -> int | None:
    return _usage(usage, "output_tokens", "completion_tokens")


def _span_event(e: AuditEvent, name: str, attributes: dict[str, Any]) -> SpanEvent:
    return SpanEvent(name, e.timestamp, {"coder_es.event.version": e.version, **attributes})


def _parts(blocks: Any) -> list[dict[str, Any]]:
    """Message blocks as the latest conventions' message parts (text and tool calls)."""
    parts: list[dict[str, Any]] = []
    for b in blocks if isinstance(blocks, list) else []:
        if not isinstance(b, dict):
            continue
        if b.get("type") == "text":
            parts.append({"type": "text", "content": b.get("text", "")})
        elif b.get("type") == "tool_use":
            parts.append(
                {
                    "type": "tool_call",
                    "id": b.get("id"),
                    "name": b.get("name"),
                    "arguments": b.get("input"),
                }
            )
        elif b.get("type") == "tool_result":
            parts.append(
                {
                    "type": "tool_call_response",
                    "id": b.get("tool_use_id"),
                    "response": b.get("content"),
                }
            )
    return parts


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=True, default=str)


class SpanTree:
    """Feed events in version order; each call returns the spans it finished."""

    def __init__(
        self, session: str, semconv: Semconv = FILE_EXPORT, started: dict[str, Any] | None = None
    ) -> None:
        self.session = session
        self.semconv = semconv
        self.started: dict[str, Any] = dict(started or {})
        """The session's ``Started`` fields (given when the feed may not include it)."""
        self._turn: SpanRecord | None = None
        self._tools: dict[str, SpanRecord] = {}
        """Tool calls of the current turn by ``tool_use_id``, completed ones included."""
        self._completed: list[str] = []
        """Completed calls whose edits may still be recorded (until the next model response)."""
        self._last_time = ""
        self._input: list[dict[str, Any]] = []
        """The turn's user message, as the next chat span's input (content capture only)."""

    def _provider(self, provider: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.semconv.latest:
            out["gen_ai.provider.name"] = provider
        if self.semconv.old:
            out["gen_ai.system"] = provider
        return out

    def _open_turn(self, e: AuditEvent) -> SpanRecord:
        agent = self.started.get("agent", "agent")
        self._turn = SpanRecord(
            key=f"turn:{e.version}",
            name=f"invoke_agent {agent}",
            kind=KIND_INTERNAL,
            start=e.timestamp,
            end=e.timestamp,
            parent=None,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": agent,
                **self._provider(self.started.get("provider")),
                "gen_ai.request.model": self.started.get("model") or None,
                "gen_ai.conversation.id": self.session,
                "coder_es.node.id": str(e.version),
            },
            order=e.version,
        )
        return self._turn

    @property
    def turn_open(self) -> bool:
        """Spans are open: a turn (or a tool call) not finished yet."""
        return self._turn is not None or bool(self._tools)

    def finish(self) -> list[SpanRecord]:
        """The spans still open (the last turn and any tool call that never completed)."""
        done = sorted(self._tools.values(), key=lambda s: s.order)
        self._tools.clear()
        self._completed.clear()
        if self._turn is not None:
            done.append(self._turn)
            self._turn = None
        return done

    def feed(self, e: AuditEvent) -> list[SpanRecord]:
        f = e.fields
        kind = e.kind  # a property that parses the topic: read once per event
        done: list[SpanRecord] = []
        if kind == "Started":
            self.started = dict(f)
            self._last_time = e.timestamp
            return done
        if kind == "SettingsChanged":
            # Between turns: the next turn runs as this agent, provider and model.
            self.started.update(agent=f.get("agent"), provider=f.get("provider"))
            self.started["model"] = f.get("model")
            return done
        if kind in ("Archived", "Unarchived"):
            return done  # which lists show the session: no part of a turn
        if kind == "HookRan":
            return [self._hook(e)]
        if kind == "UserMessageAdded" or self._turn is None:
            done.extend(self.finish())
            opened = self._open_turn(e)
            if kind == "UserMessageAdded" and self.semconv.capture_content:
                self._input = [{"role": "user", "parts": _parts(f.get("content"))}]
                if self.semconv.old and not self.semconv.latest:
                    opened.events.append(
                        SpanEvent(
                            "gen_ai.user.message", e.timestamp, {"content": _json(f.get("content"))}
                        )
                    )
        turn = self._turn
        assert turn is not None
        turn.end = max(turn.end, e.timestamp)
        if kind == "ModelResponded":
            done.extend(self._tools.pop(call_id) for call_id in self._completed)
            self._completed.clear()
            done.append(self._chat(e, turn))
        elif kind in (
            "ToolCallRequested",
            "PermissionRequested",
            "PermissionDecided",
            "ToolCallCompleted",
        ):
            self._tool(e, kind, turn)
            if kind == "ToolCallCompleted":
                self._completed.append(str(f.get("tool_use_id")))
        elif kind in ("EditApplied", "FileObserved") and str(f.get("tool_use_id")) in self._tools:
            self._tools[str(f.get("tool_use_id"))].events.append(
                _span_event(
                    e,
                    f"coder_es.{'edit' if kind == 'EditApplied' else 'file'}",
                    {
                        "coder_es.file.path": self._content(f.get("path")),
                        "coder_es.edit.outcome": f.get("outcome"),
                    },
                )
            )
        else:
            shown = self.semconv.capture_content
            turn.events.append(
                _span_event(
                    e,
                    f"coder_es.{kind}",
                    {
                        f"coder_es.{k}": v
                        for k, v in sorted(f.items())
                        if k != "prev_hash" and (shown or k in METADATA_FIELDS)
                    },
                )
            )
            if kind == "ErrorRecorded":
                turn.error = str(f.get("message"))
        self._last_time = e.timestamp
        return done

    def _content(self, value: Any) -> Any:
        """``value`` when content is captured, else None (an attribute left out)."""
        return value if self.semconv.capture_content else None

    def _hook(self, e: AuditEvent) -> SpanRecord:
        """``execute_hook {event}``: one hook run, under its tool call's span (or the turn's;
        a prompt's hooks run before its turn opens: a root span of the session's trace)."""
        f = e.fields
        call = self._tools.get(str(f.get("tool_use_id")))
        parent = call.key if call is not None else None
        prompt = f.get("hook_event") in ("UserPromptSubmit", "SessionStart")
        if parent is None and self._turn is not None and not prompt:
            parent = self._turn.key
        moment = datetime.fromisoformat(e.timestamp)
        start = (moment - timedelta(milliseconds=int(f.get("duration_ms") or 0))).isoformat()
        effect = f.get("effect") or {}
        attributes: dict[str, Any] = {
            "gen_ai.conversation.id": self.session,
            "coder_es.hook.event": f.get("hook_event"),
            "coder_es.hook.name": f.get("hook"),
            "coder_es.hook.digest": f.get("digest"),
            "coder_es.hook.exit_code": f.get("exit_code"),
            "coder_es.hook.duration_ms": f.get("duration_ms"),
        }
        for key in ("decision", "blocked"):
            if effect.get(key):
                attributes[f"coder_es.hook.{key}"] = effect[key]
        if effect.get("updated_input"):
            attributes["coder_es.hook.rewrote"] = True
        if effect.get("context"):
            attributes["coder_es.hook.added_context"] = True
        span = SpanRecord(
            key=f"hook:{e.version}",
            name=f"execute_hook {f.get('hook_event')}",
            kind=KIND_INTERNAL,
            start=start,
            end=e.timestamp,
            parent=parent,
            attributes=attributes,
            order=e.version,
        )
        if effect.get("failed"):
            span.error = str(effect["failed"])
            attributes["error.type"] = "hook_failed"
        return span

    def _chat(self, e: AuditEvent, turn: SpanRecord) -> SpanRecord:
        f = e.fields
        usage = f.get("usage")
        span = SpanRecord(
            key=f"chat:{e.version}",
            name=f"chat {f.get('model')}",
            kind=KIND_CLIENT,
            start=min(self._last_time, e.timestamp),
            end=e.timestamp,
            parent=turn.key,
            attributes={
                "gen_ai.operation.name": "chat",
                **self._provider(f.get("provider")),
                "gen_ai.request.model": f.get("model"),
                "gen_ai.response.model": f.get("model"),
                "gen_ai.response.id": f.get("request_id"),
                "gen_ai.response.finish_reasons": [str(f.get("stop_reason"))],
                "gen_ai.usage.input_tokens": input_tokens(usage),
                "gen_ai.usage.output_tokens": output_tokens(usage),
                "gen_ai.conversation.id": self.session,
                "coder_es.node.id": str(e.version),
            },
            order=e.version,
        )
        if self.semconv.capture_content:
            output = [
                {
                    "role": "assistant",
                    "parts": _parts(f.get("blocks")),
                    "finish_reason": str(f.get("stop_reason")),
                }
            ]
            if self.semconv.latest:
                if self._input:
                    span.attributes["gen_ai.input.messages"] = _json(self._input)
                span.attributes["gen_ai.output.messages"] = _json(output)
            else:
                span.events.append(
                    SpanEvent("gen_ai.choice", e.timestamp, {"message": _json(output[0])})
                )
            self._input = []
        return span

    def _tool(self, e: AuditEvent, kind: str, turn: SpanRecord) -> SpanRecord:
        f = e.fields
        call_id = str(f.get("tool_use_id"))
        tool = self._tools.get(call_id)
        name = f.get("name") or f.get("tool")
        if tool is None:
            tool = self._tools[call_id] = SpanRecord(
                # The event that opened the call names it: tool_use ids are not unique across
                # turns (the scripted provider, some OpenAI-compatible servers reuse them).
                key=f"tool:{e.version}",
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
                    "gen_ai.conversation.id": self.session,
                },
                order=e.version,
            )
        tool.end = max(tool.end, e.timestamp)
        capture = self.semconv.capture_content
        if kind == "ToolCallRequested" and capture and self.semconv.latest:
            tool.attributes["gen_ai.tool.call.arguments"] = _json(f.get("input"))
        elif kind == "PermissionRequested":
            tool.events.append(
                _span_event(
                    e,
                    "coder_es.permission.requested",
                    {
                        "coder_es.permission.subject": self._content(f.get("subject")),
                        "coder_es.permission.rule": f.get("matched_rule"),
                    },
                )
            )
        elif kind == "PermissionDecided":
            tool.events.append(
                _span_event(
                    e,
                    "coder_es.permission.decided",
                    {
                        "coder_es.permission.decision": f.get("decision"),
                        "coder_es.permission.scope": f.get("scope"),
                        "coder_es.permission.decided_by": f.get("decided_by"),
                        "coder_es.permission.subject": self._content(f.get("subject")),
                        "coder_es.permission.rule": f.get("matched_rule"),
                        "coder_es.permission.reason": self._content(f.get("reason")),
                    },
                )
            )
            if f.get("decision") == "deny":
                tool.attributes["coder_es.permission.denied"] = True
        elif kind == "ToolCallCompleted":
            tool.attributes["coder_es.tool.duration_ms"] = f.get("duration_ms")
            tool.attributes["coder_es.node.id"] = str(e.version)
            changes = f.get("files_changed") or []
            changed = [c.get("path") for c in changes if isinstance(c, dict)]
            if changed and capture:
                tool.attributes["coder_es.files_changed"] = [str(p) for p in changed]
            if f.get("is_error"):
                tool.error = "tool reported an error"
                tool.attributes["error.type"] = "tool_error"
            if capture:
                if self.semconv.latest:
                    tool.attributes["gen_ai.tool.call.result"] = f.get("output")
                else:
                    tool.events.append(
                        SpanEvent(
                            "gen_ai.tool.message",
                            e.timestamp,
                            {"id": f.get("tool_use_id"), "content": f.get("output")},
                        )
                    )
        return tool


def build_spans(
    session: str,
    events: list[AuditEvent],
    semconv: Semconv = FILE_EXPORT,
    started: dict[str, Any] | None = None,
) -> list[SpanRecord]:
    """Every span of these events, in the order they were opened."""
    tree = SpanTree(session, semconv, started)
    spans: list[SpanRecord] = []
    for e in events:
        spans.extend(tree.feed(e))
    spans.extend(tree.finish())
    spans.sort(key=lambda s: s.order)
    return spans
