"""A session forked from another continues its conversation: the requests of the new session
start with the forked-from session's path up to the fork (through a chain of forks), nothing
is copied into the new session, and its compactions never cover what it inherited."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any
from uuid import UUID

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "agent"))

from agent_helpers import Harness, collect, make_harness, text, tool, turn
from hypothesis import given, settings
from hypothesis import strategies as st

from coder_es.application import CoderApp
from coder_es.branching import Branching
from coder_es.domain.session import Session
from projections.context import (
    estimate_tokens,
    fallback_summary,
    plan_compaction,
    session_context,
)
from projections.tree import full_path, open_tree


def texts(request: Any) -> list[str]:
    out = []
    for message in request.messages:
        for block in message["content"]:
            if block.get("type") == "text":
                out.append(block["text"])
            elif block.get("type") == "tool_result":
                out.append(f"result of {block['tool_use_id']}")
    return out


def fork(h: Harness, session: str, node: str | None = None) -> str:
    return Branching(h.app, h.root).fork(session, node, new_session=True).session


def test_a_forked_session_continues_the_conversation_it_was_forked_from(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    parent = h.start(
        [
            turn(text("Reading."), tool("read", id="r1", path="README.md")),
            turn(text("It is a demo.")),
            turn(text("Later answer, after the fork point.")),
        ]
    )
    collect(parent, "what is this repo?")
    fork_at = parent.loop.state.head
    collect(parent, "and later?")
    child_id = fork(h, parent.id, fork_at)

    child = h.reopen(child_id, [turn(text("Child answer."))])
    collect(child, "child question")
    request = h.providers[-1].requests[-1]
    assert texts(request) == [
        "what is this repo?",
        "Reading.",
        "result of r1",
        "It is a demo.",
        "child question",
    ]
    # Nothing of the parent is copied into the child: its own events are its own turn.
    kinds = h.kinds(child)
    assert kinds.count("UserMessageAdded") == 1 and kinds.count("ModelResponded") == 1

    # A fork of the fork sees both: the grandparent's path, then the child's.
    grandchild = h.reopen(fork(h, child_id), [turn(text("Grandchild answer."))])
    collect(grandchild, "grandchild question")
    assert texts(h.providers[-1].requests[-1]) == [
        *texts(request),
        "Child answer.",
        "grandchild question",
    ]


def _events_of(h: Harness) -> Any:
    return lambda sid, lte: h.app.session_events(UUID(sid), lte=lte)


def test_inherited_nodes_are_named_by_their_session_and_never_compacted(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    parent = h.start([turn(text(f"parent answer {i}")) for i in range(4)])
    for i in range(4):
        collect(parent, f"parent question {i}")
    child_id = fork(h, parent.id)
    child = h.reopen(child_id, [turn(text(f"child answer {i}")) for i in range(3)])
    for i in range(3):
        collect(child, f"child question {i}")

    state = session_context(h.events(child_id), _events_of(h))
    plan = plan_compaction(state, keep_turns=1)
    assert plan is not None
    own = {str(e.originator_version) for e in h.events(child_id)}
    assert set(plan.covers) <= own and len(plan.covers) == 4  # two of the child's turns
    # Only the child's newest turn left to keep: nothing of its own is left to compact.
    child.loop.app.update(
        UUID(child_id),
        lambda s: Session.compact_context(
            s, covers=list(plan.covers), summary=plan.summary, produced_by="test"
        ),
    )
    state = session_context(h.events(child_id), _events_of(h))
    assert plan_compaction(state, keep_turns=1) is None

    # Condensed, the inherited turns are named by their own session's nodes.
    units = state.view(state.head).units
    short = str(parent.id)[:8]
    summary = fallback_summary(state, units[:2], 500, estimate_tokens)
    assert summary.startswith(f"Condensed history of nodes {short}:2-{short}:3"), summary
    assert f"- [{short}:2] User: parent question 0" in summary, summary


def test_a_fork_whose_parent_is_missing_has_no_prefix(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    parent = h.start([turn(text("parent answer")), turn(text("later answer"))])
    collect(parent, "parent question")
    child_id = fork(h, parent.id)
    only_own = session_context(h.events(child_id), lambda sid, lte: [])
    assert only_own.view(None).path == []
    collect(parent, "a later question")  # after the fork: the child never reads it
    read: list[tuple[str, int]] = []

    def events_of(sid: str, lte: int) -> Any:
        read.append((sid, lte))
        return h.app.session_events(UUID(sid), lte=lte)

    inherited = session_context(h.events(child_id), events_of)
    assert [inherited.nodes[n].ref for n in inherited.view(None).path] == [
        f"{str(parent.id)[:8]}:2",
        f"{str(parent.id)[:8]}:3",
    ]
    assert read == [(str(parent.id), 3)]


def _grow(session: Session, ops: list[tuple[str, int]]) -> None:
    """User messages, model answers and head moves, on whatever branch the head is."""
    for i, (op, pick) in enumerate(ops):
        if op == "user":
            session.add_user_message(f"{str(session.id)[:4]} user {i}")
        elif op == "model":
            session.record_model_response(
                blocks=[{"type": "text", "text": f"answer {i}"}],
                stop_reason="end_turn",
                usage={},
                provider="scripted",
                model="m",
            )
        else:
            nodes: list[Any] = [None, *session.node_ids()]
            session.move_head(nodes[pick % len(nodes)], reason="checkout")


OPS = st.lists(
    st.tuples(st.sampled_from(["user", "model", "move"]), st.integers(0, 50)), max_size=12
)


@settings(max_examples=60, deadline=None)
@given(first=OPS, forks=st.lists(st.tuples(st.integers(0, 50), OPS), min_size=1, max_size=3))
def test_a_forked_context_walks_the_same_path_as_the_tree(
    first: list[tuple[str, int]], forks: list[tuple[int, list[tuple[str, int]]]]
) -> None:
    app = CoderApp()
    try:
        session = Session.start(workspace="/w")
        _grow(session, first)
        app.save(session)
        for pick, ops in forks:
            nodes: list[Any] = [None, *session.node_ids()]
            session = Session.start(
                workspace="/w", parent_session=str(session.id), parent_node=nodes[pick % len(nodes)]
            )
            _grow(session, ops)
            app.save(session)

        def events(sid: str, lte: int) -> Any:
            return app.session_events(UUID(sid), lte=lte)

        state = session_context(app.session_events(session.id), events)
        tree = open_tree(app, session.id)
        own = str(session.id)
        expected = [
            ref.node if ref.session == own else f"{ref.session[:8]}:{ref.node}"
            for ref in full_path(app, tree, session.head)
        ]
        assert [state.nodes[n].ref for n in state.view(session.head).path] == expected
    finally:
        app.close()
