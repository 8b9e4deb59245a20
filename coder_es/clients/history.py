"""A session's conversation on the path root -> head, as plain items a client can render.

The ACP agent replays these as ``session/update`` notifications on ``session/load``; the WebSocket
server sends them in a ``history`` message. Only node events are read (the path of a forked
session starts in its parent), so the cost grows with the length of the path, not of the log.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from coder_es.application import CoderApp
from coder_es.domain.session import Session
from projections.tree import open_tree, path_events

USER = "user"
TEXT = "text"
THINKING = "thinking"
TOOL_CALL = "tool_call"
TOOL_RESULT = "tool_result"
SUMMARY = "summary"


@dataclass(frozen=True)
class HistoryItem:
    kind: str
    """``user``, ``text``, ``thinking``, ``tool_call``, ``tool_result`` or ``summary``."""
    session: str
    node: str
    text: str = ""
    tool_use_id: str | None = None
    name: str | None = None
    input: dict[str, Any] = field(default_factory=dict)
    is_error: bool = False
    files_changed: tuple[dict[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "session": self.session, "node": self.node}
        if self.kind in (USER, TEXT, THINKING, SUMMARY, TOOL_RESULT):
            out["text"] = self.text
        if self.kind in (TOOL_CALL, TOOL_RESULT):
            out["tool_use_id"] = self.tool_use_id
            out["name"] = self.name
        if self.kind == TOOL_CALL:
            out["input"] = self.input
        if self.kind == TOOL_RESULT:
            out["is_error"] = self.is_error
            out["files_changed"] = list(self.files_changed)
        return out


def items_of(event: Any) -> list[HistoryItem]:
    """The items one node event contributes."""
    sid, node = str(event.originator_id), str(event.originator_version)
    if isinstance(event, Session.UserMessageAdded):
        text = "\n".join(str(b.get("text", "")) for b in event.content if b.get("type") == "text")
        return [HistoryItem(USER, sid, node, text)]
    if isinstance(event, Session.ModelResponded):
        out: list[HistoryItem] = []
        for block in event.blocks:
            kind = block.get("type")
            if kind == "text" and block.get("text"):
                out.append(HistoryItem(TEXT, sid, node, str(block["text"])))
            elif kind == "thinking" and block.get("thinking"):
                out.append(HistoryItem(THINKING, sid, node, str(block["thinking"])))
            elif kind == "tool_use":
                out.append(
                    HistoryItem(
                        TOOL_CALL,
                        sid,
                        node,
                        tool_use_id=str(block.get("id", "")),
                        name=str(block.get("name", "")),
                        input=dict(block.get("input") or {}),
                    )
                )
        return out
    if isinstance(event, Session.ToolCallCompleted):
        return [
            HistoryItem(
                TOOL_RESULT,
                sid,
                node,
                event.output,
                tool_use_id=event.tool_use_id,
                name=event.name,
                is_error=event.is_error,
                files_changed=tuple(event.files_changed),
            )
        ]
    if isinstance(event, Session.ContextCompacted):
        return [HistoryItem(SUMMARY, sid, node, event.summary)]
    return []


def session_history(app: CoderApp, session_id: UUID | str) -> list[HistoryItem]:
    """Every item on the path from the root to the session's head, oldest first."""
    sid = session_id if isinstance(session_id, UUID) else app.resolve_session(session_id)
    tree = open_tree(app, sid)
    items: list[HistoryItem] = []
    for event in path_events(app, tree, tree.head_node):
        items.extend(items_of(event))
    return items
