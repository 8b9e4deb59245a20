"""Agent loop overhead: everything a step costs besides the model and the tools.

A session of N steps (default 1000) runs against a scripted provider with no delay whose every
turn calls one trivial tool (``noop``, read-only, allowed by rule). Each step is timed from the
start of one model call to the start of the next; the time spent inside the provider's stream
and inside the tool is subtracted, leaving the loop's own work: deciding, building and recording
the request, recording the response, the permission decision and the result, and saving them.

    python3 bench/loop.py                      sqlite and lmdb (when it opens), 1000 steps
    python3 bench/loop.py --steps 200 --backend sqlite
    python3 bench/loop.py --telemetry          also each session with live OpenTelemetry export
    python3 bench/loop.py --instructions       live export's cost counted in instructions (valgrind)
    python3 bench/loop.py --search-index       also each session with the search index fed

With ``--telemetry`` every round also runs the session with live export (coder_es.telemetry: real
OTLP/HTTP exporter and batch thread) to an OTLP receiver on loopback (a process of its own, as a
collector is), and prints, with export on and off and their ratio (the target is <= 1.1): the
median loop overhead per step (wall), and the whole session per step in wall time and in CPU time
of this process (all threads: the exporter's batch thread encodes and sends beside the loop, so
under load the process's CPU time is the honest measure of what export costs), the telemetry's
close (its last flush) included; as ratios of medians and as the median of each round's ratio.
Time on a shared 2-core machine moves by 10-30% from one minute to the next; ``--instructions``
counts instead (valgrind's callgrind, every thread of the process): four whole processes, sessions
of 100 and 400 steps with export off and on, and per step the difference of 400 and 100 (imports
and set-up cancel out), so the ratio does not depend on the machine's load.
``--search-index`` does the same with the search index kept as the session records
(``projections.search.follow``, as ``run`` and ``chat`` keep it), and prints the time the last
catch-up took when the session closed.

Printed per backend: the median overhead per step over all steps, the median of steps 1-20
(the baseline, same run) and of the last 20 steps, and their ratio (the target is <= 2: no
O(history) work per step). ``store floor`` is the median time to save one small event on the same
backend, measured in this run, for scale.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from coder_es.agent import updates as up
from coder_es.agent.decider import DecisionContext
from coder_es.agent.runner import AgentLoop, LoopConfig, LoopDeps
from coder_es.application import CoderApp
from coder_es.permissions.policy import PermissionAnswer, Policy
from coder_es.permissions.presets import Preset
from coder_es.permissions.rules import Rule
from coder_es.permissions.subject import Subject
from coder_es.providers.base import Provider
from coder_es.providers.scripted import ScriptedProvider
from coder_es.providers.types import ModelRequest, StreamEvent
from coder_es.store.config import StoreConfig
from coder_es.tools.base import Tool, ToolCall, ToolContext, ToolResult
from coder_es.tools.registry import LocalExecutor, ToolRegistry


@dataclass(frozen=True)
class NoopInput:
    n: int = 0


class NoopTool(Tool[NoopInput]):
    name = "noop"
    description = "does nothing"
    input_type = NoopInput
    read_only = True

    def subject(self, args: NoopInput, root: Path) -> Subject:
        return Subject("command", "noop")

    async def run(self, args: NoopInput, ctx: ToolContext) -> ToolResult:
        return ToolResult(f"ok {args.n}")


@dataclass
class Timings:
    model_starts: list[float] = field(default_factory=list)
    excluded: list[float] = field(default_factory=list)  # model + tool time, per step


class TimedProvider(Provider):
    name: ClassVar[str] = "scripted"

    def __init__(self, inner: ScriptedProvider, timings: Timings) -> None:
        self.inner = inner
        self.model = inner.model
        self.t = timings

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        start = time.perf_counter()
        self.t.model_starts.append(start)
        self.t.excluded.append(0.0)
        spent = 0.0
        it = self.inner.stream(request).__aiter__()
        while True:
            t0 = time.perf_counter()
            try:
                event = await it.__anext__()
            except StopAsyncIteration:
                break
            spent += time.perf_counter() - t0
            yield event
        self.t.excluded[-1] += spent
        # The scripted provider keeps every request for tests; a real provider keeps none, and
        # 1000 retained requests only make the garbage collector's passes longer.
        self.inner.requests.clear()


class TimedExecutor:
    def __init__(self, inner: LocalExecutor, timings: Timings) -> None:
        self.inner = inner
        self.t = timings

    async def execute(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        t0 = time.perf_counter()
        result = await self.inner.execute(call, ctx)
        self.t.excluded[-1] += time.perf_counter() - t0
        return result


async def _never_asked(_q: up.PermissionRequired) -> PermissionAnswer:
    raise AssertionError("the benchmark should never ask")


_RECEIVER = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


class _Receiver:
    """An OTLP/HTTP endpoint on loopback that accepts every request, in a process of its own
    (as a collector is: its work must not be counted as the loop's)."""

    def __init__(self) -> None:
        import subprocess

        self.process = subprocess.Popen(
            [sys.executable, "-c", _RECEIVER], stdout=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None
        self.url = f"http://127.0.0.1:{int(self.process.stdout.readline())}"

    def close(self) -> None:
        self.process.terminate()
        self.process.wait()


def run_session(
    backend: str,
    steps: int,
    where: Path,
    telemetry_endpoint: str | None = None,
    observed: list[float] | None = None,
    search_feed: list[float] | None = None,
    cpu: list[float] | None = None,
    wall: list[float] | None = None,
    export_delay_ms: float | None = None,
) -> list[float]:
    suffix = "-otel" if telemetry_endpoint else ""
    suffix += "-search" if search_feed is not None else ""
    config = StoreConfig(backend=backend, path=where / (backend + suffix))
    app = CoderApp(config)
    telemetry = None
    feed = None
    if search_feed is not None:
        from projections.search.follow import SearchFeed

        feed = SearchFeed(app).attach()
    if telemetry_endpoint is not None:
        from coder_es.telemetry.attach import start_telemetry

        if export_delay_ms is None:
            telemetry = start_telemetry(
                app, environ={"OTEL_EXPORTER_OTLP_ENDPOINT": telemetry_endpoint}
            )
        else:
            from coder_es.telemetry.live import LiveTelemetry
            from coder_es.telemetry.settings import TelemetrySettings

            settings = TelemetrySettings.resolve(
                {"OTEL_EXPORTER_OTLP_ENDPOINT": telemetry_endpoint}
            )
            assert settings is not None
            telemetry = LiveTelemetry(settings, schedule_delay_millis=export_delay_ms)
            telemetry.attach(app)
        if observed is not None:
            inner = app.save_observers[-1]

            def timed(recordings: list[Any]) -> None:
                t0 = time.perf_counter()
                inner(recordings)
                observed.append(time.perf_counter() - t0)

            app.save_observers[-1] = timed
    try:
        workspace = where / "ws"
        workspace.mkdir(exist_ok=True)
        turns: list[dict[str, Any]] = [
            {
                "blocks": [
                    {"type": "text", "text": f"step {i}: calling the tool"},
                    {"type": "tool_use", "name": "noop", "input": {"n": i}},
                ]
            }
            for i in range(steps)
        ]
        turns.append({"blocks": [{"type": "text", "text": "done"}]})
        timings = Timings()
        registry = ToolRegistry([NoopTool()])
        preset = Preset("bench", ("noop",), (Rule("*", None, "allow", "preset:bench"),))
        # The doom-loop guard is off: the inputs differ anyway, this only documents intent.
        policy = Policy(preset=preset, doom_threshold=0)
        deps = LoopDeps(
            provider=TimedProvider(ScriptedProvider(turns, chunk_chars=64), timings),
            executor=TimedExecutor(LocalExecutor(registry), timings),
            answerer=_never_asked,
            decision=DecisionContext(registry, policy, max_steps=steps + 1),
        )
        session = app.start_session(workspace=str(workspace), agent="bench", model="bench")
        loop = AgentLoop(app, session.id, deps, config=LoopConfig(max_steps=steps + 1))
        cpu_start, wall_start = time.process_time(), time.perf_counter()
        outcome = asyncio.run(loop.send("go"))
        if telemetry is not None:  # its last flush is part of what export costs
            telemetry.close()
            telemetry = None
        if cpu is not None:  # the process's CPU time per step, every thread included
            cpu.append((time.process_time() - cpu_start) / steps)
        if wall is not None:
            wall.append((time.perf_counter() - wall_start) / steps)
        assert outcome.reason == "end_turn", outcome
        starts = timings.model_starts
        return [(starts[i + 1] - starts[i]) - timings.excluded[i] for i in range(len(starts) - 1)]
    finally:
        if feed is not None and search_feed is not None:
            t0 = time.perf_counter()
            feed.close()
            search_feed.append(time.perf_counter() - t0)
            assert not feed.failed and feed.indexed > 0
        if telemetry is not None:
            telemetry.close()
        app.close()


def _run_into(out: list[Any], *args: Any, **kwargs: Any) -> None:
    out.append(run_session(*args, **kwargs))


def store_floor(backend: str, where: Path, n: int = 200) -> float:
    app = CoderApp(StoreConfig(backend=backend, path=where / f"{backend}-floor"))
    try:
        session = app.start_session(workspace="/w")
        samples = []
        for i in range(n):
            session.record_error(kind="bench", message=f"event {i}")
            t0 = time.perf_counter()
            app.save(session)
            samples.append(time.perf_counter() - t0)
        return statistics.median(samples)
    finally:
        app.close()


def backend_available(backend: str, where: Path) -> str | None:
    try:
        CoderApp(StoreConfig(backend=backend, path=where / f"{backend}-probe")).close()
    except Exception as e:  # report and skip, the other backends still run
        return f"{type(e).__name__}: {e}"
    return None


SHORT, LONG = 100, 400


def _instructions(backend: str, steps: int, endpoint: str | None) -> int:
    """Instructions executed by a whole process running one session (callgrind counts every
    thread's; what the machine's load does to time does not move it)."""
    import re
    import subprocess

    command = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        os.path.abspath(__file__),
        "--one-session",
        backend,
        str(steps),
    ]
    if endpoint is not None:
        command += ["--endpoint", endpoint]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    found = re.search(r"Collected : (\d+)", done.stderr)
    assert found is not None, done.stderr[-2000:]
    return int(found.group(1))


def instructions(backends: list[str], endpoint: str) -> None:
    """Per step, instructions with export on and off: the difference between sessions of
    ``LONG`` and ``SHORT`` steps (imports and set-up cancel out), all four runs side by side."""
    from concurrent.futures import ThreadPoolExecutor

    for backend in backends:
        runs = [(n, url) for url in (None, endpoint) for n in (SHORT, LONG)]
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            counts = list(pool.map(partial(_instructions, backend), *zip(*runs, strict=True)))
        off = (counts[1] - counts[0]) / (LONG - SHORT)
        on = (counts[3] - counts[2]) / (LONG - SHORT)
        print(
            f"{backend}: live telemetry: instructions per step (callgrind, all threads) with "
            f"export {on / 1e6:.2f}M, without {off / 1e6:.2f}M; ratio {on / off:.3f} "
            "(target <= 1.1)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3, help="sessions per backend (medians)")
    parser.add_argument("--backend", action="append", choices=["sqlite", "lmdb", "popo"])
    parser.add_argument(
        "--telemetry", action="store_true", help="also run with live OpenTelemetry export"
    )
    parser.add_argument(
        "--search-index", action="store_true", help="also run with the search index fed"
    )
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count what live export costs per step in instructions, under valgrind (minutes)",
    )
    parser.add_argument(
        "--one-session", nargs=2, metavar=("BACKEND", "STEPS"), help=argparse.SUPPRESS
    )
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_session:  # a child of --instructions
        backend, steps = args.one_session[0], int(args.one_session[1])
        with tempfile.TemporaryDirectory() as tmp:
            # Batches go by size (512 spans), not by the clock: under valgrind a second is a
            # few steps, and time-based batches would multiply the requests.
            run_session(backend, steps, Path(tmp), args.endpoint, export_delay_ms=1e7)
        return
    if args.instructions:
        if shutil.which("valgrind") is None:
            sys.exit("bench/loop.py: --instructions needs valgrind (Debian package valgrind)")
        counting = _Receiver()
        try:
            instructions(args.backend or ["sqlite", "lmdb"], counting.url)
        finally:
            counting.close()
        return
    receiver = _Receiver() if args.telemetry else None
    backends = args.backend or ["sqlite", "lmdb"]
    window = 20
    ms = 1000.0
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        available = []
        for backend in backends:
            problem = backend_available(backend, where)
            if problem is None:
                available.append(backend)
            else:
                print(f"{backend}: skipped ({problem})")
        results: dict[str, list[list[float]]] = {b: [] for b in available}
        floors: dict[str, list[float]] = {b: [] for b in available}
        exported: dict[str, list[list[float]]] = {b: [] for b in available}
        # Time spent in the telemetry save observer (in the loop's thread), per save.
        observed: dict[str, list[float]] = {b: [] for b in available}
        searched: dict[str, list[list[float]]] = {b: [] for b in available}
        closing: dict[str, list[float]] = {b: [] for b in available}
        cpu_off: dict[str, list[float]] = {b: [] for b in available}
        cpu_on: dict[str, list[float]] = {b: [] for b in available}
        wall_off: dict[str, list[float]] = {b: [] for b in available}
        # Whole-session CPU and wall time per step of the runs with live telemetry.
        otel_cpu: dict[str, list[float]] = {b: [] for b in available}
        otel_wall: dict[str, list[float]] = {b: [] for b in available}
        # Rounds of the backends are interleaved so a slow moment of the disk hits them all.
        for r in range(args.rounds):
            for backend in available:
                round_dir = where / f"round{r}"
                round_dir.mkdir(exist_ok=True)
                floors[backend].append(store_floor(backend, round_dir))
                fed = (backend, args.steps, round_dir)

                # The runs with export or index go before the plain run in odd rounds and after
                # it in even ones, so neither side always runs on a warmer cache.
                extra: list[Callable[[], None]] = []
                if receiver is not None:
                    extra.append(
                        partial(
                            _run_into,
                            exported[backend],
                            *fed,
                            receiver.url,
                            observed[backend],
                            cpu=otel_cpu[backend],
                            wall=otel_wall[backend],
                        )
                    )
                if args.search_index:
                    extra.append(
                        partial(
                            _run_into,
                            searched[backend],
                            *fed,
                            search_feed=closing[backend],
                            cpu=cpu_on[backend],
                        )
                    )
                for other in extra if r % 2 else ():
                    other()
                _run_into(results[backend], *fed, cpu=cpu_off[backend], wall=wall_off[backend])
                for other in () if r % 2 else reversed(extra):
                    other()
        for backend in available:
            rounds = results[backend]
            med = statistics.median(statistics.median(o) for o in rounds)
            at10 = statistics.median(statistics.median(o[5:15]) for o in rounds)
            early = statistics.median(statistics.median(o[:window]) for o in rounds)
            late = statistics.median(statistics.median(o[-window:]) for o in rounds)
            floor = statistics.median(floors[backend])
            print(
                f"{backend}: {args.steps} steps x {args.rounds} rounds; loop overhead per step "
                f"(median of round medians) {med * ms:.2f} ms"
            )
            print(
                f"{backend}: baseline steps 1-{window} {early * ms:.2f} ms; around step 10 "
                f"{at10 * ms:.2f} ms; last {window} steps {late * ms:.2f} ms; "
                f"ratio step {args.steps} / step 10 = {late / at10:.2f} (target <= 2)"
            )
            print(
                f"{backend}: store floor (one save of one event) {floor * ms:.2f} ms; "
                f"overhead / floor = {med / floor:.1f}"
            )
            if exported[backend]:
                on = statistics.median(statistics.median(o) for o in exported[backend])
                print(
                    f"{backend}: live telemetry: overhead per step with export {on * ms:.2f} ms, "
                    f"without {med * ms:.2f} ms; ratio {on / med:.2f} (target <= 1.1); "
                    f"in the save observer {statistics.median(observed[backend]) * ms:.3f} ms "
                    f"per save (median), {len(observed[backend]) / (args.steps * args.rounds):.1f} "
                    "saves per step"
                )
                for what, on_runs, off_runs in (
                    ("wall", otel_wall[backend], wall_off[backend]),
                    ("cpu", otel_cpu[backend], cpu_off[backend]),
                ):
                    with_, without = statistics.median(on_runs), statistics.median(off_runs)
                    # Each round's two runs are neighbours in time: their ratio is the least
                    # disturbed by the machine's load drifting between rounds.
                    paired = statistics.median(
                        a / b for a, b in zip(on_runs, off_runs, strict=True)
                    )
                    print(
                        f"{backend}: live telemetry: whole session per step ({what}) with export "
                        f"{with_ * ms:.2f} ms, without {without * ms:.2f} ms; ratio "
                        f"{with_ / without:.2f}, median of the rounds' ratios {paired:.2f} "
                        "(target <= 1.1)"
                    )
            if searched[backend]:
                on = statistics.median(statistics.median(o) for o in searched[backend])
                print(
                    f"{backend}: search index fed: overhead per step {on * ms:.2f} ms, "
                    f"without {med * ms:.2f} ms; ratio {on / med:.2f}; last catch-up at close "
                    f"{statistics.median(closing[backend]) * ms:.1f} ms (median)"
                )
                c_on, c_off = (statistics.median(c) for c in (cpu_on[backend], cpu_off[backend]))
                print(
                    f"{backend}: search index fed: process CPU per step (whole step, all threads) "
                    f"{c_on * ms:.2f} ms, without {c_off * ms:.2f} ms; ratio {c_on / c_off:.2f}; "
                    f"the feed costs {(c_on - c_off) * ms:.2f} ms CPU per step"
                )
    if receiver is not None:
        receiver.close()


if __name__ == "__main__":
    main()
