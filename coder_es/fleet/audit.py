"""Whole-store checks after a fleet run: nothing lost, nothing duplicated.

The store's hash chains (``coder_es.audit.verify_store``: an event lost, altered or written twice
breaks them) and the blobs they name; then per session: every tool call the model made has
exactly one result, and no conversation step was answered twice (in a session that was never
forked or rewound, every node's parent is the node before it, so a second model response to the
same point shows up as a branch).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from uuid import UUID

from coder_es.application import CoderApp
from coder_es.audit.verify import verify_store
from coder_es.records import event_kind

NODE_KINDS = ("UserMessageAdded", "ModelResponded", "ToolCallCompleted", "ContextCompacted")


def audit_session(app: CoderApp, session_id: UUID) -> list[str]:
    """Semantic duplicates in one session (the chain is checked by ``audit_sessions``)."""
    problems: list[str] = []
    events = app.session_events(session_id)
    asked: Counter[str] = Counter()
    results: Counter[str] = Counter()
    linear = not any(event_kind(e) == "HeadMoved" for e in events)
    previous_node: str | None = None
    for e in events:
        kind = event_kind(e)
        if kind == "ModelResponded":
            asked.update(b["id"] for b in e.blocks if b.get("type") == "tool_use")
        elif kind == "ToolCallCompleted":
            results[e.tool_use_id] += 1
        if kind in NODE_KINDS:
            if linear and e.parent != previous_node:
                problems.append(
                    f"session {session_id} v{e.originator_version}: {kind} attaches to node "
                    f"{e.parent}, not to the previous node {previous_node} (a step ran twice?)"
                )
            previous_node = str(e.originator_version)
    for call_id, n in sorted((asked + results).items()):
        if asked[call_id] > 1:
            problems.append(f"session {session_id}: tool call {call_id} was requested {n} times")
        if results[call_id] != 1:
            problems.append(
                f"session {session_id}: tool call {call_id} has {results[call_id]} results"
            )
    return problems


def audit_sessions(app: CoderApp, session_ids: Iterable[UUID] | None = None) -> list[str]:
    ids = (
        list(session_ids)
        if session_ids is not None
        else [s.id for s in app.list_sessions(archived=None)]
    )
    report = verify_store(app, check_blobs=True, advance=False)
    problems = [str(p) for p in report.problems]
    for sid in ids:
        problems.extend(audit_session(app, sid))
    return problems
