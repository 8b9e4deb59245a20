"""The decider is a pure function of the events; request building is incremental and exact."""

from __future__ import annotations

import random
from typing import Any

from coder_es.agent import decider as d
from coder_es.agent.request import RequestRecorder, RequestSettings, expand_request
from coder_es.agent.state import LoopState
from coder_es.domain.session import Session
from coder_es.permissions.policy import Policy
from coder_es.providers.types import ModelRequest, canonical_request
from coder_es.store.blobs import MemoryBlobStore
from coder_es.tools.registry import default_registry
from projections.context import ContextBuilder, ContextState, stable_prefix

CTX = d.DecisionContext(default_registry(), Policy.for_agent("build"), max_steps=3)


def use(cid: str, name: str, **inp: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": cid, "name": name, "input": inp}


def respond(s: Session, *blocks: dict[str, Any]) -> str:
    stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    return s.record_model_response(
        blocks=list(blocks), stop_reason=stop, usage={}, provider="p", model="m"
    )


def state_of(s: Session) -> LoopState:
    return LoopState.from_events(s.pending_events)


def test_decisions_walk_a_response_in_block_order(tmp_path: Any) -> None:
    s = Session.start(workspace=str(tmp_path))
    s.add_user_message("go")
    assert d.decide(state_of(s), CTX) == d.CallModel(1)
    node = respond(
        s,
        use("a", "read", path="x"),
        use("b", "grep", pattern="y"),
        use("c", "edit", path="x", old_string="1", new_string="2"),
        use("e", "find", pattern="*"),
    )
    action = d.decide(state_of(s), CTX)
    assert isinstance(action, d.RecordToolCalls) and [c.id for c in action.calls] == [
        "a",
        "b",
        "c",
        "e",
    ]
    for c in action.calls:
        s.request_tool_call(node=node, tool_use_id=c.id, name=c.name, input=c.input)
    decided = []
    while isinstance(action := d.decide(state_of(s), CTX), d.DecideByRule):
        decided.append(action.call.id)
        s.decide_permission(
            tool_use_id=action.call.id,
            tool=action.call.name,
            subject=action.evaluation.subject.text,
            decision="allow",
        )
    assert decided == ["a", "b", "c", "e"]
    assert action == d.RunTools(tuple(c for c in _calls(s) if c.id in "ab"), concurrent=True)
    for cid, name in (("a", "read"), ("b", "grep")):
        s.complete_tool_call(tool_use_id=cid, name=name, output="")
    assert d.decide(state_of(s), CTX) == d.RunTools((_calls(s)[2],), concurrent=False)
    s.complete_tool_call(tool_use_id="c", name="edit", output="")
    assert d.decide(state_of(s), CTX) == d.RunTools((_calls(s)[3],), concurrent=False)
    s.complete_tool_call(tool_use_id="e", name="find", output="")
    assert d.decide(state_of(s), CTX) == d.CallModel(2)
    respond(s, {"type": "text", "text": "done"})
    assert d.decide(state_of(s), CTX) == d.Done("end_turn")


def _calls(s: Session) -> list[Any]:
    st = state_of(s)
    from coder_es.tools.base import ToolCall

    return [ToolCall(c.id, c.name, c.input) for c in st.calls.values()]


def test_step_limit_and_pause_turn(tmp_path: Any) -> None:
    s = Session.start(workspace=str(tmp_path))
    s.add_user_message("go")
    s.record_model_response(
        blocks=[{"type": "text", "text": "..."}],
        stop_reason="pause_turn",
        usage={},
        provider="p",
        model="m",
    )
    assert d.decide(state_of(s), CTX) == d.CallModel(2)
    respond(s, {"type": "text", "text": "x"})
    s.record_model_response(blocks=[], stop_reason="pause_turn", usage={}, provider="p", model="m")
    assert d.decide(state_of(s), CTX) == d.Done("max_steps")
    # A new user message starts a new turn with a fresh step count.
    s.add_user_message("again")
    assert d.decide(state_of(s), CTX) == d.CallModel(1)


def test_incremental_state_equals_rebuilt_state(tmp_path: Any) -> None:
    s = Session.start(workspace=str(tmp_path))
    incremental = LoopState()
    for i in range(5):
        s.add_user_message(f"m{i}")
        node = respond(s, use(f"t{i}", "bash", command="ls"))
        s.request_tool_call(node=node, tool_use_id=f"t{i}", name="bash", input={"command": "ls"})
        s.decide_permission(
            tool_use_id=f"t{i}",
            tool="bash",
            subject="ls",
            decision="allow",
            scope="always" if i == 2 else "once",
            pattern="ls *",
        )
        s.complete_tool_call(tool_use_id=f"t{i}", name="bash", output="ok")
    s.move_head("2", reason="checkout")
    for event in s.pending_events:
        incremental.apply(event)
        incremental.apply(event)  # applying twice is harmless
    rebuilt = state_of(s)
    assert incremental == rebuilt
    assert rebuilt.calls["t4"].repeats == 4 and rebuilt.always == [
        {"tool": "bash", "pattern": "ls *", "decision": "allow"}
    ]
    assert d.decide(rebuilt, CTX) == d.CallModel(1)


def _random_session(seed: int) -> Session:
    rnd = random.Random(seed)
    s = Session.start(workspace="/w")
    for step in range(60):
        roll = rnd.random()
        if roll < 0.3 or s.head is None:
            s.add_user_message(f"user {step}")
        elif roll < 0.6:
            respond(
                s, {"type": "text", "text": f"answer {step}"}, use(f"c{step}", "read", path="a")
            )
        elif roll < 0.85:
            s.complete_tool_call(
                tool_use_id=f"c{step}",
                name="read",
                output=f"out {step}",
                is_error=rnd.random() < 0.2,
            )
        elif roll < 0.95 and s.node_ids():
            s.move_head(rnd.choice(s.node_ids()), reason="checkout")
        else:
            s.compact_context(covers=[], summary=f"summary {step}", produced_by="fallback")
    return s


BUDGET = 10**7  # nothing is trimmed: the messages are the whole path root -> head


def _messages(builder: ContextBuilder, source: Any, head: str) -> list[Any]:
    return builder.build(source, head, budget=BUDGET).request.messages


def test_incremental_messages_equal_a_fresh_build_at_every_step() -> None:
    settings = RequestSettings(model="m", system="sys", tools=[])
    for seed in range(8):
        s = _random_session(seed)
        live, state = ContextBuilder(settings), ContextState()
        for event in s.pending_events:
            state.apply(event)
            head = str(event.originator_version) if isinstance(event, Session.NodeEvent) else None
            if head is None:
                continue
            fresh = _messages(
                ContextBuilder(settings), s.pending_events[: event.originator_version], head
            )
            assert _messages(live, state, head) == fresh, (seed, head)


def test_consecutive_roles_merge_and_requests_expand_exactly() -> None:
    s = Session.start(workspace="/w")
    s.add_user_message("first")
    s.add_user_message("second")  # e.g. after a crash before any answer
    node = respond(
        s, {"type": "text", "text": "ok"}, use("a", "read", path="x"), use("b", "read", path="y")
    )
    s.complete_tool_call(tool_use_id="a", name="read", output="A")
    s.complete_tool_call(tool_use_id="b", name="read", output="B", is_error=True)
    settings = RequestSettings(model="m", system="sys", tools=default_registry().definitions())
    built = ContextBuilder(settings).build(
        s.pending_events, s.head, budget=BUDGET, metadata={"session_id": "s"}
    )
    request, messages = built.request, built.request.messages
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert [b.get("text") for b in messages[0]["content"]] == ["first", "second"]
    assert messages[2]["content"][1] == {
        "type": "tool_result",
        "tool_use_id": "b",
        "content": "B",
        "is_error": True,
    }
    assert node == "4"
    blobs = MemoryBlobStore()
    digest = RequestRecorder(blobs).record(request)
    validated = ModelRequest(
        model="m",
        messages=list(messages),
        system="sys",
        tools=settings.tools,
        max_tokens=settings.max_tokens,
    )
    assert expand_request(blobs, digest) == canonical_request(validated)
    # Recording the same request again stores nothing new.
    before = len(list(blobs.digests()))
    assert RequestRecorder(blobs).record(request) == digest
    assert len(list(blobs.digests())) == before


def test_delta_manifests_expand_to_every_request_across_forks_and_summaries() -> None:
    settings = RequestSettings(model="m", system="sys", tools=[])
    for seed in range(6):
        s = _random_session(seed)
        blobs = MemoryBlobStore()
        recorder = RequestRecorder(blobs)
        builder, state = ContextBuilder(settings), ContextState()
        sent: list[Any] = []
        for event in s.pending_events:
            state.apply(event)
            if not isinstance(event, Session.NodeEvent):
                continue
            request = builder.build(state, str(event.originator_version), budget=BUDGET).request
            messages = request.messages
            if not messages:
                continue
            digest = recorder.record(request, stable_prefix(sent, messages))
            sent = messages
            validated = ModelRequest(
                model="m", messages=list(messages), system="sys", max_tokens=8192
            )
            assert expand_request(blobs, digest) == canonical_request(validated), seed
