"""Tool calls side by side: eight reads of large files in one model response, against the same
eight reads made one per response (the baseline, measured in the same run); and four ``task``
calls in one response against one, with a model latency of 200 ms per call (scripted).

    python3 bench/parallel.py                  8 files of 4 MB, 5 rounds, sqlite
    python3 bench/parallel.py --mb 2 --rounds 3

Each round writes fresh files (so no read finds its blob already stored) and runs two sessions
on a real store with the scripted provider and the real ``read`` tool: one whose model asks for
the eight reads at once, one whose model asks for them one at a time. Timed: the tool phase,
from the first ``ToolStarted`` to the last ``ToolCompleted`` (parallel), or the sum of each
call's ``ToolStarted`` to ``ToolCompleted`` (sequential), in wall time and in the process's
CPU time over the same spans (the same work either way: a CPU ratio far from 1 means the runs
did not do the same thing). Printed: medians and the wall ratio (target <= 0.5; on two cores
CPU-bound work cannot go below 0.5, so the CPU per read is printed too). Tasks: the parent's
turn, from its first request to its end, with one task and with four (each child answers after
200 ms; so does the parent): the ratio four/one (target <= 1.5). The loop's overhead per step
is bench/loop.py's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from coder_es.agent import updates as up
from coder_es.application import CoderApp
from coder_es.permissions.rules import Rule
from coder_es.providers.scripted import ScriptedProvider
from coder_es.service.api import AgentService, SessionOptions, auto_answerer
from coder_es.store.config import StoreConfig

FILES = 8


def write_files(where: Path, tag: str, mb: int) -> list[str]:
    names = []
    line = "x" * 70
    for i in range(FILES):
        name = f"big_{tag}_{i}.txt"
        body = "".join(f"{tag} {i} {n} {line}\n" for n in range(mb * 1024 * 1024 // 80))
        (where / name).write_text(body)
        names.append(name)
    return names


def read(path: str, i: int) -> dict[str, Any]:
    return {"type": "tool_use", "id": f"toolu_{i}", "name": "read", "input": {"path": path}}


Stamp = tuple[str, float, float]
"""(update kind, wall clock, process CPU time)"""


async def run(app: CoderApp, root: Path, turns: list[dict[str, Any]]) -> list[Stamp]:
    service = AgentService(
        app, root, provider_factory=lambda _n, _m: ScriptedProvider(turns, chunk_chars=4096)
    )
    options = SessionOptions(agent="build", rules=(Rule("read", None, "allow", "bench"),))
    handle = await service.create_session(options)
    stamps: list[Stamp] = []
    async for update in handle.send("read them", answerer=auto_answerer(False)):
        if isinstance(update, up.ToolStarted | up.ToolCompleted):
            stamps.append((type(update).__name__, time.perf_counter(), time.process_time()))
        elif isinstance(update, up.TurnEnded):
            assert update.reason == "end_turn", update
    await handle.close()
    return stamps


def parallel_time(stamps: list[Stamp]) -> tuple[float, float]:
    """(wall, CPU) from the first start to the last end."""
    return stamps[-1][1] - stamps[0][1], stamps[-1][2] - stamps[0][2]


def sequential_time(stamps: list[Stamp]) -> tuple[float, float]:
    """(wall, CPU) summed over each call's start to its end."""
    starts = [(w, c) for kind, w, c in stamps if kind == "ToolStarted"]
    ends = [(w, c) for kind, w, c in stamps if kind == "ToolCompleted"]
    pairs = list(zip(starts, ends, strict=True))
    return sum(e[0] - s[0] for s, e in pairs), sum(e[1] - s[1] for s, e in pairs)


def task_turn(app: CoderApp, root: Path, count: int, latency_ms: int) -> float:
    """The wall time of a parent turn whose model calls ``count`` tasks at once."""

    def task(i: int) -> dict[str, Any]:
        prompt = {"description": f"part {i}", "prompt": f"look at part {i}"}
        return {"type": "tool_use", "id": f"toolu_t{i}", "name": "task", "input": prompt}

    slow = {"delay_ms": latency_ms}
    scripts = [[{"blocks": [task(i) for i in range(count)], **slow}, {**done_turn(), **slow}]]
    scripts += [[{**done_turn(), **slow}] for _ in range(count)]

    async def go() -> float:
        service = AgentService(
            app, root, provider_factory=lambda _n, _m: ScriptedProvider(scripts.pop(0))
        )
        handle = await service.create_session(SessionOptions(agent="build"))
        t0 = time.perf_counter()
        async for update in handle.send("split it", answerer=auto_answerer(False)):
            if isinstance(update, up.TurnEnded):
                assert update.reason == "end_turn", update
        elapsed = time.perf_counter() - t0
        await handle.close()
        return elapsed

    return asyncio.run(go())


def done_turn() -> dict[str, Any]:
    return {"blocks": [{"type": "text", "text": "done"}]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=4, help="size of each file")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backend", default="sqlite", choices=["sqlite", "lmdb"])
    parser.add_argument("--latency-ms", type=int, default=200, help="scripted model latency")
    args = parser.parse_args()
    done = done_turn()
    together: list[tuple[float, float]] = []
    one_by_one: list[tuple[float, float]] = []
    one_task: list[float] = []
    four_tasks: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        root = where / "ws"
        root.mkdir()
        app = CoderApp(StoreConfig(backend=args.backend, path=where / "store"))
        try:
            for r in range(args.rounds):
                names = write_files(root, f"p{r}", args.mb)
                turns = [{"blocks": [read(n, i) for i, n in enumerate(names)]}, done]
                together.append(parallel_time(asyncio.run(run(app, root, turns))))
                names = write_files(root, f"s{r}", args.mb)
                turns = [{"blocks": [read(n, i)]} for i, n in enumerate(names)] + [done]
                one_by_one.append(sequential_time(asyncio.run(run(app, root, turns))))
                one_task.append(task_turn(app, root, 1, args.latency_ms))
                four_tasks.append(task_turn(app, root, 4, args.latency_ms))
        finally:
            app.close()
    par = statistics.median(w for w, _ in together)
    seq = statistics.median(w for w, _ in one_by_one)
    par_cpu = statistics.median(c for _, c in together)
    seq_cpu = statistics.median(c for _, c in one_by_one)
    print(f"{FILES} reads of {args.mb} MB files, {args.rounds} rounds, {args.backend}")
    print("                                            wall ms    CPU ms")
    print(f"  sequential (one per response, baseline): {seq * 1000:8.1f}  {seq_cpu * 1000:8.1f}")
    print(f"  parallel (one response):                 {par * 1000:8.1f}  {par_cpu * 1000:8.1f}")
    print(
        f"  CPU per read: {seq_cpu * 1000 / FILES:.1f} ms; CPU parallel/sequential: "
        f"{par_cpu / seq_cpu:.2f}"
    )
    print(f"  ratio parallel/sequential (wall): {par / seq:.2f} (target <= 0.5)")
    one, four = statistics.median(one_task), statistics.median(four_tasks)
    print(f"task calls, model latency {args.latency_ms} ms per call")
    print(f"  one task in a response (baseline):  {one * 1000:8.1f} ms")
    print(f"  four tasks in one response:         {four * 1000:8.1f} ms")
    print(f"  ratio four/one: {four / one:.2f} (target <= 1.5)")


if __name__ == "__main__":
    main()
