"""The "sessions summary" read model: one row per session, a pure fold over its events.

The same ``fold`` feeds the projection process (``projection``) and the rebuild from zero
(``rebuild``), so comparing the two checks the projection's bookkeeping, not two copies of logic.

Status, from the last event that says something about it: ``new`` (started), ``running`` (a
message or tool work is under way), ``waiting`` (a permission question is open), ``complete``
(the model ended its turn), ``stopped`` (the turn used its step limit), ``error`` (a
non-retryable error ended the turn), ``cancelled``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from coder_es.records import event_kind

_CALM_STOPS = ("end_turn", "stop_sequence", "max_tokens", "refusal")


@dataclass(frozen=True)
class SessionRow:
    session_id: str
    title: str = ""
    workspace: str = ""
    status: str = "new"
    events: int = 0
    user_messages: int = 0
    model_turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    last_version: int = 0
    last_activity: datetime | None = None


def fold(row: SessionRow | None, event: Any) -> SessionRow:
    """The row after ``event`` (``row`` is None before the session's first event)."""
    kind = event_kind(event)
    if row is None:
        row = SessionRow(session_id=str(event.originator_id))
    changes: dict[str, Any] = {
        "events": row.events + 1,
        "last_version": int(event.originator_version),
        "last_activity": event.timestamp,
    }
    if kind == "Started":
        changes.update(title=event.title, workspace=event.workspace, status="new")
    elif kind == "UserMessageAdded":
        changes.update(user_messages=row.user_messages + 1, status="running")
    elif kind == "ModelResponded":
        done = event.stop_reason in _CALM_STOPS
        changes.update(model_turns=row.model_turns + 1, status="complete" if done else "running")
    elif kind == "ToolCallCompleted":
        changes.update(
            tool_calls=row.tool_calls + 1,
            tool_errors=row.tool_errors + (1 if event.is_error else 0),
        )
    elif kind == "PermissionRequested":
        changes["status"] = "waiting"
    elif kind == "PermissionDecided":
        changes["status"] = "running"
    elif kind == "ErrorRecorded" and not event.retryable:
        changes["status"] = "error"
    elif kind == "TurnCancelled":
        changes["status"] = "cancelled"
    elif kind == "StepLimitReached":
        changes["status"] = "stopped"
    return replace(row, **changes)


def rebuild(events: Iterable[Any]) -> dict[str, SessionRow]:
    """Every session's row, folded from zero."""
    rows: dict[str, SessionRow] = {}
    for event in events:
        key = str(event.originator_id)
        rows[key] = fold(rows.get(key), event)
    return rows


def all_events(app: Any, batch: int = 500) -> Iterator[Any]:
    """Every event of an application, in notification order."""
    start = 1
    while True:
        page = app.recorder.select_notifications(start=start, limit=batch)
        for notification in page:
            yield app.mapper.to_domain_event(notification)
        if len(page) < batch:
            return
        start = page[-1].id + 1
