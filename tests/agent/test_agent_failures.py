"""Retries, broken streams and cancellation while waiting for an answer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import ClassVar

from agent_helpers import Harness, collect, text, tool, turn

from coder_es.agent import updates as up
from coder_es.agent.decider import CANCELLED_BEFORE_RUN, DecisionContext
from coder_es.agent.runner import AgentLoop, LoopConfig, LoopDeps
from coder_es.permissions.policy import PermissionAnswer, Policy
from coder_es.permissions.rules import parse_rule
from coder_es.providers.base import Provider
from coder_es.providers.errors import OverloadedError, RateLimitedError
from coder_es.providers.types import (
    BlockComplete,
    Finish,
    MessageStart,
    ModelRequest,
    Retrying,
    StreamEvent,
    StreamFailed,
    TextDelta,
    empty_usage,
)
from coder_es.service.api import SessionHandle
from coder_es.tools.registry import LocalExecutor, default_registry


class FlakyProvider(Provider):
    """First request: a retry before content, then a stream that breaks after some text.
    Second request: a whole answer."""

    name: ClassVar[str] = "flaky"

    def __init__(self) -> None:
        self.model = "flaky-1"
        self.calls = 0

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self.calls += 1
        yield MessageStart(model=self.model)
        if self.calls == 1:
            yield Retrying(1, 4, 0.25, RateLimitedError("slow down", provider="flaky"))
            yield MessageStart(model=self.model)
            yield TextDelta(0, "Half an ans")
            error = OverloadedError("connection dropped mid-stream", provider="flaky")
            yield StreamFailed(error)
            raise error
        yield TextDelta(0, "Whole answer.")
        yield BlockComplete(0, {"type": "text", "text": "Whole answer."})
        yield Finish(stop_reason="end_turn", usage=empty_usage())


class InstantClock:
    def __init__(self) -> None:
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return 0.0

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


async def _no(_q: up.PermissionRequired) -> PermissionAnswer:
    raise AssertionError("nothing should ask")


def test_a_stream_broken_after_content_is_retried_and_everything_is_recorded(h: Harness) -> None:
    session = h.app.start_session(workspace=str(h.root), model="flaky-1")
    clock = InstantClock()
    registry = default_registry()
    deps = LoopDeps(
        provider=FlakyProvider(),
        executor=LocalExecutor(registry),
        answerer=_no,
        decision=DecisionContext(registry, Policy.for_agent("build")),
        clock=clock,
    )
    seen: list[up.Update] = []
    loop = AgentLoop(h.app, session.id, deps, emit=seen.append, config=LoopConfig(retry_delay_s=2))
    outcome = asyncio.run(loop.send("hello"))
    assert outcome.reason == "end_turn"
    assert clock.slept == [2]
    sid = str(session.id)
    assert h.kinds(sid)[2:] == [
        "RetryScheduled",
        "ErrorRecorded",
        "RetryScheduled",
        "ModelResponded",
    ]
    first_retry, error, second_retry = (
        h.of(sid, "RetryScheduled")[0],
        *h.of(sid, "ErrorRecorded"),
        h.of(sid, "RetryScheduled")[1],
    )
    assert (first_retry.attempt, first_retry.delay_s) == (
        2,
        0.25,
    ) and "slow down" in first_retry.reason
    assert error.kind == "OverloadedError" and error.retryable and error.attempt == 1
    assert (second_retry.attempt, second_retry.delay_s) == (2, 2)
    assert h.of(sid, "ModelResponded")[0].blocks == [{"type": "text", "text": "Whole answer."}]
    assert [type(u).__name__ for u in seen if isinstance(u, up.Retry | up.Error)] == [
        "Retry",
        "Error",
        "Retry",
    ]


def test_cancelling_while_waiting_for_an_answer(h: Harness) -> None:
    handle = h.start([turn(tool("bash", command="rm -f README.md"))], agent="plan")

    async def cancel_on_question(hd: SessionHandle, update: up.Update) -> None:
        if isinstance(update, up.PermissionRequired):
            assert hd.pending_questions == [update.tool_use_id]
            hd.cancel()

    updates = collect(handle, "clean", yes=None, on_update=cancel_on_question)
    assert updates[-1].reason == "cancelled"  # type: ignore[attr-defined]
    assert h.kinds(handle)[-4:] == [
        "ToolCallRequested",
        "PermissionRequested",
        "TurnCancelled",
        "ToolCallCompleted",
    ]
    # Cancelled at the question: the call never ran, and is not said to "may have partially run".
    assert h.of(handle, "ToolCallCompleted")[0].output == CANCELLED_BEFORE_RUN
    assert (h.root / "README.md").exists()
    again = h.reopen(handle.id, [turn(text("ok"))])
    assert collect(again, "never mind")[-1].reason == "end_turn"  # type: ignore[attr-defined]


def test_cancelling_during_the_model_stream_records_no_response(h: Harness) -> None:
    handle = h.start([turn(text("too slow"), delay_ms=30_000)])

    async def cancel_at_once(hd: SessionHandle, update: up.Update) -> None:
        if isinstance(update, up.UserMessage):
            hd.cancel("changed my mind")

    updates = collect(handle, "first try", on_update=cancel_at_once)
    assert updates[-1].reason == "cancelled"  # type: ignore[attr-defined]
    assert h.kinds(handle)[-2:] == ["UserMessageAdded", "TurnCancelled"]
    assert h.of(handle, "TurnCancelled")[0].tool_use_ids == []
    again = h.reopen(handle.id, [turn(text("answered"))])
    assert collect(again, "second try")[-1].reason == "end_turn"  # type: ignore[attr-defined]
    sent = h.providers[-1].requests[0].messages
    assert [b["text"] for b in sent[0]["content"]] == ["first try", "second try"]


def test_outside_paths_need_an_explicit_rule(h: Harness, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.txt"
    outside.write_text("far away\n")
    script = [turn(tool("read", path=str(outside))), turn(text("done"))]
    denied = h.start(script)
    collect(denied, "read it", yes=False)
    decided = h.of(denied, "PermissionDecided")[0]
    assert decided.decision == "deny" and decided.matched_rule == "outside_workspace"
    allowed = h.start(script, rules=[parse_rule(f"read:{tmp_path.as_posix()}/*", "allow")])
    collect(allowed, "read it", yes=False)
    result = h.of(allowed, "ToolCallCompleted")[0]
    assert result.output == "1\tfar away" and not result.is_error
    assert h.of(allowed, "FileObserved")[0].path == outside.as_posix()
