"""Where a harness session's next turn starts: its own resume, the CLI's own fork, or a rebuild.

A harness keeps its own copy of the conversation (Claude Code's transcript, Codex's thread,
Gemini CLI's chat). When the session's head is where the harness left it (the last node of the
session's own last turn), the next turn resumes the harness's session as it is. When the head
was moved (``rewind S NODE --conversation``, ``fork S NODE``, a session forked from another),
the harness must continue from that node instead, holding the history up to it and not after:

- Claude Code forks its own session there: ``--resume ID --fork-session --resume-session-at
  UUID``, UUID being the message of its stream that made the node (any node: a model response,
  a tool result);
- the other CLIs are rebuilt: a fresh harness session is given the recorded prompts of the
  turns up to the node's, while the proxy serves the recorded model answers
  (``coder_es.harness.serve``) and the files those turns change are dropped (the workspace is
  already at the node); the new prompt then resumes the rebuilt session live. Their node must
  end a turn (a model's final answer, or a user message: the turn before it).

A user message at the head continues from the node before it: a harness takes one prompt per
turn, so the new prompt takes the place of the message at the head.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from coder_es.application import CoderApp
from coder_es.domain.session import Session
from coder_es.errors import UsageError
from coder_es.harness.serve import RecordedExchange
from coder_es.records import event_kind
from projections.tree import full_path, open_tree

NODE_EVENTS = ("UserMessageAdded", "ModelResponded", "ToolCallCompleted")


@dataclass(frozen=True)
class RebuildTurn:
    prompt: str
    yes: bool
    exchanges: tuple[RecordedExchange, ...]


@dataclass(frozen=True)
class ResumePlan:
    resume: str | None
    """The harness's session id to resume (None: a fresh one)."""
    fork_at: str | None = None
    """Claude Code: the message its fork ends at."""
    rebuild: tuple[RebuildTurn, ...] = ()
    """Turns to replay through the proxy first (the other CLIs)."""
    recorded_at: str = ""
    """Where the recording stood (for messages): ``SESSION@NODE``."""


@dataclass
class _Turn:
    session: str
    events: list[Any]
    ran: Any | None

    @property
    def nodes(self) -> list[int]:
        return [int(e.originator_version) for e in self.events if event_kind(e) in NODE_EVENTS]


def _turns(session: str, events: list[Any]) -> list[_Turn]:
    out: list[_Turn] = []
    current: list[Any] | None = None
    for e in events:
        kind = event_kind(e)
        if kind == "UserMessageAdded":
            current = [e]
        elif current is not None:
            current.append(e)
            if kind == "HarnessRan":
                out.append(_Turn(session, current, e))
                current = None
    return out


def plan(app: CoderApp, session_id: UUID, kind: str) -> ResumePlan:
    tree = open_tree(app, session_id)
    refs = full_path(app, tree, tree.head_node)
    if not refs:
        return ResumePlan(None)
    events: dict[str, list[Any]] = {}
    turns: dict[str, list[_Turn]] = {}
    for ref in refs:
        if ref.session not in events:
            events[ref.session] = list(app.session_events(UUID(ref.session)))
            turns[ref.session] = _turns(ref.session, events[ref.session])
    # The anchor: the head, or the node before a user message at the head.
    anchor_at = len(refs) - 1
    head_event = _event(events, refs[anchor_at].session, int(refs[anchor_at].node))
    if head_event is not None and event_kind(head_event) == "UserMessageAdded":
        anchor_at -= 1
    if anchor_at < 0:
        return ResumePlan(None)
    anchor = refs[anchor_at]
    node = int(anchor.node)
    turn = next((t for t in turns[anchor.session] if node in t.nodes), None)
    if turn is None or turn.ran is None:
        msg = f"node {anchor.node} is in no recorded turn of the harness: cannot continue there"
        raise UsageError(msg)
    own = turns.get(str(session_id)) or []
    if own and turn is own[-1] and node == turn.nodes[-1]:
        return ResumePlan(turn.ran.harness_session)  # where the harness left it
    where = f"{anchor.session[:8]}@{anchor.node}"
    if kind == "claude-code":
        uuid = _claude_message(app, turn, node)
        if uuid is None:
            msg = (
                f"node {anchor.node} cannot be found in Claude Code's recorded stream (a turn "
                "recorded before streams were): continue from another node"
            )
            raise UsageError(msg)
        return ResumePlan(turn.ran.harness_session, uuid, recorded_at=where)
    if node != turn.nodes[-1]:
        msg = (
            f"the {kind} harness can be continued from the end of a turn only (its last node, "
            f"{turn.nodes[-1]}, or a user message), not from inside one (node {anchor.node})"
        )
        raise UsageError(msg)
    path_turns: list[_Turn] = []
    for ref in refs[: anchor_at + 1]:
        for t in turns[ref.session]:
            if int(ref.node) in t.nodes and (not path_turns or path_turns[-1] is not t):
                path_turns.append(t)
    rebuild = tuple(RebuildTurn(_prompt(t), _yes(t), tuple(_exchanges(app, t))) for t in path_turns)
    return ResumePlan(None, rebuild=rebuild, recorded_at=where)


def _event(events: dict[str, list[Any]], session: str, version: int) -> Any | None:
    for e in events.get(session, []):
        if int(e.originator_version) == version:
            return e
    return None


def _prompt(turn: _Turn) -> str:
    content = getattr(turn.events[0], "content", None) or []
    return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))


def _yes(turn: _Turn) -> bool:
    recorded = getattr(turn.ran, "yes", None)
    if recorded is not None:
        return bool(recorded)
    return not any(
        isinstance(e, Session.PermissionDecided) and e.decided_by == "rule" for e in turn.events
    )


def _exchanges(app: CoderApp, turn: _Turn) -> list[RecordedExchange]:
    blobs = app.blobs.for_session(UUID(turn.session))
    return [
        RecordedExchange(
            version=int(e.originator_version),
            method=e.method,
            path=e.path,
            request=blobs.get(e.request_blob),
            status=e.status,
            response_headers=dict(e.response_headers),
            response=blobs.get(e.response_blob),
        )
        for e in turn.events
        if isinstance(e, Session.ModelExchanged)
    ]


def _claude_message(app: CoderApp, turn: _Turn, node: int) -> str | None:
    """The uuid of the message of Claude Code's stream that made ``node``."""
    blob = getattr(turn.ran, "stream_blob", None)
    event = next((e for e in turn.events if int(e.originator_version) == node), None)
    if not blob or event is None:
        return None
    lines: list[dict[str, Any]] = []
    for raw in app.blobs.for_session(UUID(turn.session)).get(blob).splitlines():
        try:
            obj = json.loads(raw)
        except ValueError:
            continue
        if isinstance(obj, dict) and obj.get("uuid") and obj.get("parent_tool_use_id") is None:
            lines.append(obj)

    def blocks(obj: dict[str, Any]) -> list[dict[str, Any]]:
        content = (obj.get("message") or {}).get("content")
        return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []

    found: str | None = None
    if isinstance(event, Session.ToolCallCompleted):
        for obj in lines:
            if obj.get("type") == "user" and any(
                b.get("type") == "tool_result" and b.get("tool_use_id") == event.tool_use_id
                for b in blocks(obj)
            ):
                found = str(obj["uuid"])
    elif isinstance(event, Session.ModelResponded):
        calls = {b.get("id") for b in event.blocks if b.get("type") == "tool_use"}
        texts = "".join(b.get("text", "") for b in event.blocks if b.get("type") == "text")
        for obj in lines:
            if obj.get("type") != "assistant":
                continue
            mine = blocks(obj)
            if (calls and any(b.get("id") in calls for b in mine)) or (
                not calls
                and any(
                    b.get("type") == "text" and b.get("text") and b["text"] in texts for b in mine
                )
            ):
                found = str(obj["uuid"])
    return found
