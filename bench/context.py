"""Context building at the head of a 10k-node path: current projection vs. from zero.

    python3 bench/context.py [--nodes 10000] [--budget 100000] [--quick]

A session of ``--nodes`` conversation nodes (turns of: user ask, a model response calling a tool
that reads or edits a file, its result, a final answer) is recorded through the real ``Session``
aggregate, with file snapshots in a blob store; one variant also compacts every 2,000 nodes
(from node 1,500) as the loop would (``plan_compaction`` recorded as ``ContextCompacted``).
Figures, as medians:

- from zero: fold every event into a new ``ContextState`` and build (the baseline);
- current: build again at the same head with the state up to date;
- next step: apply one more step's events (response + tool result) and build.

Target (issue 9): building at the head of a 10k-node path under 20 ms when the projection is
current; the ratio to building from zero is printed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from coder_es.domain.session import Session
from coder_es.store.blobs import MemoryBlobStore
from projections.context import (
    ContextBuilder,
    ContextSettings,
    ContextState,
    plan_compaction,
)

SETTINGS = ContextSettings(
    model="bench",
    system="You are a coding agent. " * 40,
    tools=[
        {"name": n, "description": n * 20, "input_schema": {"type": "object"}}
        for n in ("read", "write", "edit", "bash", "grep", "find")
    ],
    instructions="# Instructions from AGENTS.md\n" + "Run the tests. " * 50,
)


def median_ms(fn: Callable[[], Any], reps: int) -> float:
    times = []
    for rep in range(reps + 2):
        t0 = time.perf_counter()
        fn()
        if rep >= 2:  # two warm-up runs
            times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


class Writer:
    def __init__(self, blobs: MemoryBlobStore) -> None:
        self.session = Session.start(workspace="/ws", model="bench")
        self.blobs = blobs
        self.events: list[Any] = list(self.session.collect_events())
        self.calls = 0
        self.nodes = 0

    def flush(self) -> list[Any]:
        new = list(self.session.collect_events())
        self.events.extend(new)
        return new

    def step(self, i: int) -> None:
        s = self.session
        self.calls += 1
        call = f"toolu_{self.calls}"
        path = f"src/mod{i % 40}.py"
        edit = i % 3 == 0
        s.record_model_response(
            blocks=[
                {"type": "text", "text": f"Looking at {path}."},
                {
                    "type": "tool_use",
                    "id": call,
                    "name": "edit" if edit else "read",
                    "input": {"path": path},
                },
            ],
            stop_reason="tool_use",
            usage={},
            provider="bench",
            model="bench",
        )
        content = (f"# module {i % 40} version {i}\n" + "def f(x):\n    return x\n" * 30).encode()
        digest = self.blobs.put(content)
        if edit:
            s.apply_edit(
                path=path,
                base=None,
                disk=None,
                proposed=digest,
                result=digest,
                outcome="direct",
                tool_use_id=call,
            )
            output = f"edited {path}"
        else:
            s.observe_file(path=path, hash=digest, size=len(content), tool_use_id=call)
            output = content.decode()
        s.complete_tool_call(tool_use_id=call, name="edit" if edit else "read", output=output)
        self.nodes += 2

    def turn(self, i: int) -> None:
        self.session.add_user_message(f"Task {i}: change the behaviour of f in module {i % 40}")
        self.step(i)
        self.session.record_model_response(
            blocks=[{"type": "text", "text": f"Done with task {i}."}],
            stop_reason="end_turn",
            usage={},
            provider="bench",
            model="bench",
        )
        self.nodes += 2


def record(nodes: int, compact_every: int | None) -> tuple[Writer, MemoryBlobStore]:
    blobs = MemoryBlobStore()
    w = Writer(blobs)
    state = ContextState()
    i = 0
    next_compaction = (compact_every or 0) * 3 // 4  # the last one well before the head
    while w.nodes < nodes:
        w.turn(i)
        i += 1
        if compact_every and w.nodes >= next_compaction:
            for event in w.flush():
                state.apply(event)
            plan = plan_compaction(state, keep_turns=4)
            if plan is not None:
                w.session.compact_context(
                    covers=list(plan.covers), summary=plan.summary, produced_by="fallback"
                )
                w.nodes += 1
            next_compaction += compact_every
    w.flush()
    return w, blobs


def bench(nodes: int, budget: int, compact_every: int | None, reps: int) -> None:
    w, blobs = record(nodes, compact_every)
    events = list(w.events)
    builder = ContextBuilder(SETTINGS, blobs=blobs)

    def from_zero() -> Any:
        fresh = ContextBuilder(SETTINGS, blobs=blobs)
        return fresh.build(ContextState.from_events(events), budget=budget)

    state = ContextState.from_events(events)
    built = builder.build(state, budget=budget)
    zero = median_ms(from_zero, max(3, reps // 5))
    current = median_ms(lambda: builder.build(state, budget=budget), reps)

    # One more step at a time: the model's response and its tool result, then the build.
    steps: list[list[Any]] = []
    for k in range(reps + 2):
        w.step(100_000 + k)
        steps.append(w.flush())
    it = iter(steps)

    def next_step() -> Any:
        for event in next(it):
            state.apply(event)
        return builder.build(state, budget=budget)

    step = median_ms(next_step, reps)
    label = f"compacted every {compact_every}" if compact_every else "never compacted"
    print(
        f"{nodes} nodes ({len(events)} events, {label}), budget {budget}: "
        f"sent {len(built.full)} full + {len(built.trimmed)} trimmed nodes, "
        f"{built.condensed_units} units condensed, {built.tokens} tokens, "
        f"{len(built.files)} files"
    )
    print(f"  from zero (fold + build): {zero:8.2f} ms  (baseline)")
    print(
        f"  current projection:       {current:8.2f} ms  ratio {current / zero:.4f}"
        f"  ({zero / current:.0f}x faster)  target < 20 ms: "
        f"{'met' if current < 20 else 'NOT met'}"
    )
    print(f"  next step (2 events):     {step:8.2f} ms  ratio {step / zero:.4f}")
    print(f"  full view rebuilds: {state.full_rebuilds}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--budget", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    reps = 5 if args.quick else 25
    for compact_every in (None, 2_000):
        bench(args.nodes, args.budget, compact_every, reps)
    bench(args.nodes, 20_000, 2_000, reps)


if __name__ == "__main__":
    main()
