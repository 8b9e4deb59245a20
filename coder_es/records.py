"""Plain-JSON records of domain events, for display, export and comparison."""

from __future__ import annotations

from typing import Any

_BASE = ("originator_id", "originator_version", "timestamp")


def event_kind(event: Any) -> str:
    """``UserMessageAdded``, ``ToolCallCompleted``...: the event class name."""
    return type(event).__name__


def event_fields(event: Any) -> dict[str, Any]:
    return {k: v for k, v in vars(event).items() if k not in _BASE and not k.startswith("_")}


def event_record(event: Any) -> dict[str, Any]:
    return {
        "session": str(event.originator_id),
        "version": event.originator_version,
        "kind": event_kind(event),
        "timestamp": event.timestamp.isoformat(),
        "fields": event_fields(event),
    }


def summarize(event: Any, width: int = 80) -> str:
    """A one-line human summary of an event."""
    f = event_fields(event)
    kind = event_kind(event)
    if kind == "Started":
        text = f"workspace={f['workspace']} agent={f['agent']} provider={f['provider']}"
        if f.get("parent_session"):
            text += f" forked from {f['parent_session'][:8]}@{f['parent_node']}"
    elif kind == "UserMessageAdded":
        text = " ".join(b.get("text", f"[{b.get('type')}]") for b in f["content"])
    elif kind == "ModelResponded":
        parts = []
        for b in f["blocks"]:
            if b.get("type") == "text":
                parts.append(b["text"])
            elif b.get("type") == "tool_use":
                parts.append(f"<{b['name']}>")
            else:
                parts.append(f"[{b.get('type')}]")
        text = f"({f['stop_reason']}) " + " ".join(parts)
    elif kind == "ToolCallCompleted":
        text = f"{f['name']} {'ERROR ' if f['is_error'] else ''}{f['output']}"
    elif kind == "ToolCallRequested":
        text = f"{f['name']} {f['input']}"
    elif kind in ("PermissionRequested", "PermissionDecided"):
        text = f"{f['tool']} {f['subject']!r}"
        if kind == "PermissionDecided":
            text = f"{f['decision']} ({f['scope']}, by {f['decided_by']}) " + text
    elif kind in ("FileObserved", "EditApplied"):
        text = f["path"] + (f" {f['outcome']}" if kind == "EditApplied" else "")
    elif kind == "HeadMoved":
        text = f"{f['previous']} -> {f['node']} ({f['reason']})"
    elif kind == "NodeLabelled":
        text = f"{f['node']} = {f['name']!r}"
    else:
        text = ", ".join(f"{k}={v}" for k, v in f.items() if k != "prev_hash")
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"
