"""Tool calls of one model response side by side: read-only calls overlap, calls that may write
run alone in the model's order, results are recorded in the model's order whatever order the
calls finish in, and permission questions come one at a time."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from agent_helpers import Harness, collect, text, tool, turn

from coder_es.agent import updates as up
from coder_es.permissions.rules import Rule
from coder_es.permissions.subject import Subject
from coder_es.providers.scripted import ScriptedProvider
from coder_es.service.api import AgentService, SessionOptions
from coder_es.tools.base import Tool, ToolContext, ToolResult
from coder_es.tools.files import ReadTool, WriteTool
from coder_es.tools.registry import ToolRegistry


@dataclass(frozen=True)
class NapInput:
    label: str
    seconds: float = 0.0


class Spans:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.spans: dict[str, tuple[float, float]] = {}

    def add(self, name: str, start: float, end: float) -> None:
        with self.lock:
            self.spans[name] = (start, end)


class NapTool(Tool[NapInput]):
    """Sleeps in a thread (as a real read does its work) and notes when it ran."""

    name: ClassVar[str] = "nap"
    description: ClassVar[str] = "sleeps"
    input_type: ClassVar[type] = NapInput
    read_only: ClassVar[bool] = True

    def __init__(self, spans: Spans) -> None:
        self.log = spans

    def subject(self, args: NapInput, root: Path) -> Subject:
        return Subject("command", args.label)

    async def run(self, args: NapInput, ctx: ToolContext) -> ToolResult:
        def work() -> ToolResult:
            start = time.monotonic()
            time.sleep(args.seconds)
            self.log.add(args.label, start, time.monotonic())
            return ToolResult(f"slept {args.label}")

        return await asyncio.to_thread(work)


class NapWriteTool(NapTool):
    name: ClassVar[str] = "napw"
    read_only: ClassVar[bool] = False


def service(h: Harness, turns: list[dict[str, Any]], spans: Spans) -> AgentService:
    registry = ToolRegistry([NapTool(spans), NapWriteTool(spans), ReadTool(), WriteTool()])
    return AgentService(
        h.app,
        h.root,
        tools=registry,
        provider_factory=lambda _n, _m: ScriptedProvider(turns, model="scripted-test"),
    )


def start(h: Harness, turns: list[dict[str, Any]], spans: Spans, *rules: Rule) -> Any:
    allow = (Rule("nap", None, "allow"), Rule("napw", None, "allow"), *rules)
    options = SessionOptions(agent="build", rules=allow)
    return asyncio.run(service(h, turns, spans).create_session(options))


def test_read_only_calls_overlap_and_results_keep_the_model_order(h: Harness) -> None:
    spans = Spans()
    turns = [
        turn(
            tool("nap", "a", label="a", seconds=0.4),
            tool("nap", "b", label="b", seconds=0.1),
            tool("nap", "c", label="c", seconds=0.2),
        ),
        turn(text("done")),
    ]
    handle = start(h, turns, spans)
    updates = collect(handle, "go")
    assert isinstance(updates[-1], up.TurnEnded) and updates[-1].reason == "end_turn"
    a, b, c = spans.spans["a"], spans.spans["b"], spans.spans["c"]
    # They ran at the same time: b and c started before a (the slowest, given first) ended.
    assert b[0] < a[1] and c[0] < a[1]
    assert b[1] < a[1]  # b finished first...
    # ...but the log and the updates hold the results in the order the model asked for them.
    assert [e.tool_use_id for e in h.of(handle, "ToolCallCompleted")] == ["a", "b", "c"]
    done = [u.tool_use_id for u in updates if isinstance(u, up.ToolCompleted)]
    assert done == ["a", "b", "c"]


def test_calls_that_write_run_alone_in_the_model_order(h: Harness) -> None:
    spans = Spans()
    turns = [
        turn(
            tool("nap", "r1", label="r1", seconds=0.2),
            tool("napw", "w1", label="w1", seconds=0.1),
            tool("nap", "r2", label="r2", seconds=0.1),
            tool("nap", "r3", label="r3", seconds=0.1),
            tool("napw", "w2", label="w2", seconds=0.05),
        ),
        turn(text("done")),
    ]
    handle = start(h, turns, spans)
    collect(handle, "go")
    s = spans.spans
    assert s["r1"][1] <= s["w1"][0]  # the write waits for the read before it
    assert s["w1"][1] <= min(s["r2"][0], s["r3"][0])  # and the reads after it wait for it
    assert s["r2"][0] < s["r3"][1] and s["r3"][0] < s["r2"][1]  # r2 and r3 overlap
    assert max(s["r2"][1], s["r3"][1]) <= s["w2"][0]
    order = [e.tool_use_id for e in h.of(handle, "ToolCallCompleted")]
    assert order == ["r1", "w1", "r2", "r3", "w2"]


def test_real_reads_of_one_response_are_recorded_in_order(h: Harness) -> None:
    for i in range(4):
        (h.root / f"f{i}.txt").write_text(f"file {i}\n" * 20000)
    turns = [
        turn(*(tool("read", f"r{i}", path=f"f{i}.txt") for i in (3, 0, 2, 1))),
        turn(text("done")),
    ]
    handle = start(h, turns, Spans())
    collect(handle, "go")
    completed = h.of(handle, "ToolCallCompleted")
    assert [e.tool_use_id for e in completed] == ["r3", "r0", "r2", "r1"]
    firsts = [e.output.splitlines()[0].split("\t") for e in completed]
    assert [(n.strip(), line) for n, line in firsts] == [("1", f"file {i}") for i in (3, 0, 2, 1)]
    observed = [e.path for e in h.of(handle, "FileObserved")]
    assert sorted(observed) == ["f0.txt", "f1.txt", "f2.txt", "f3.txt"]


def test_permission_questions_of_concurrent_calls_come_one_at_a_time(h: Harness) -> None:
    spans = Spans()
    turns = [
        turn(
            tool("nap", "q1", label="q1", seconds=0.05),
            tool("nap", "q2", label="q2", seconds=0.05),
        ),
        turn(text("done")),
    ]
    handle = start(h, turns, spans, Rule("nap", None, "ask"))
    waiting: list[str] = []
    most = 0

    async def answer(handle: Any, update: up.Update) -> None:
        nonlocal most
        if isinstance(update, up.PermissionRequired):
            waiting.append(update.tool_use_id)
            most = max(most, len(handle.pending_questions))
            await asyncio.sleep(0.05)
            from coder_es.permissions.policy import PermissionAnswer

            await handle.answer(update.tool_use_id, PermissionAnswer.allow_once("user"))

    collect(handle, "go", yes=None, on_update=answer)
    assert waiting == ["q1", "q2"]
    assert most == 1  # never two questions open at once
    assert sorted(spans.spans) == ["q1", "q2"]  # both ran once both were answered
    assert [e.tool_use_id for e in h.of(handle, "ToolCallCompleted")] == ["q1", "q2"]
