"""Hooks: what a PreToolUse hook adds to a tool call, and what a turn without hooks costs.

1. A session of N steps (default 40), each calling ``bash`` with ``true``, through the service
   (scripted provider, real store, the session's sandbox), run without hooks and with one
   PreToolUse hook that exits 0 at once (``exit 0``), rounds interleaved. Printed: the median
   step time of each, their difference (the hook's cost per tool call, sandbox included; the
   target is < 40 ms), and for scale the median time of the hook run alone (``run_hook``: the
   pipeline and the sandbox), in a sandbox prepared ahead (as a turn's hooks after its first
   run: ``tools.with_input``) and in one set up at its start, against spawning the same command
   bare (``bash -c 'exit 0'`` with the same JSON on stdin) and the bash tool running it, with
   the ratios, and the load average.

2. ``--baseline DIR`` (a checkout of the code before hooks, e.g. a worktree of main): the
   agent loop's overhead per step with no hook configured, ours against DIR's, by
   ``bench/loop.py`` of each checkout in its own process: wall time (alternating runs, medians)
   and, with valgrind, instructions per step (the difference of 400- and 100-step sessions,
   which does not depend on the machine's load). The target is <= 1.02.

    python3 bench/hooks.py                         the hook's cost
    python3 bench/hooks.py --baseline /work/main   and the no-hook turn against main
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import itertools
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from coder_es.agent import updates as up
from coder_es.application import CoderApp
from coder_es.hooks.command import run_hook
from coder_es.hooks.spec import HookSpec
from coder_es.permissions.rules import Rule
from coder_es.providers.scripted import ScriptedProvider
from coder_es.sandbox import SandboxSettings, availability
from coder_es.service.api import AgentService, SessionOptions, auto_answerer
from coder_es.store.blobs import MemoryBlobStore
from coder_es.store.config import StoreConfig
from coder_es.tools.base import ToolContext
from coder_es.tools.bash import BashInput, BashTool
from coder_es.tools.with_input import keep_prepared, release
from coder_es.workspace.workspace import Workspace

HERE = Path(__file__).resolve().parent.parent
HOOK = HookSpec("PreToolUse", "exit 0", "bash")
HOOK_MS: list[int] = []  # the hook runs' own durations in the sessions (HookRan.duration_ms)
ms = 1000.0


def _turns(steps: int, latency_ms: int) -> list[dict[str, Any]]:
    call = {"type": "tool_use", "name": "bash", "input": {"command": "true"}}
    return [{"blocks": [call], "delay_ms": latency_ms} for _ in range(steps)] + [
        {"blocks": [{"type": "text", "text": "done"}]}
    ]


def _cpu() -> float:
    """CPU seconds of this process and its reaped children (the sandboxes, the hooks)."""
    own, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


async def _session(
    root: Path, store: Path, steps: int, hooks: tuple[HookSpec, ...], latency_ms: int
) -> tuple[list[float], float]:
    """Per step: from one model response to the next (the tool call and everything around it);
    and the CPU time per step."""
    app = CoderApp(StoreConfig(backend="sqlite", path=store))
    turns = _turns(steps, latency_ms)
    cpu0 = _cpu()
    try:
        service = AgentService(
            app,
            root,
            provider_factory=lambda _n, _m: ScriptedProvider(turns, model="bench"),
            hooks=hooks,
        )
        options = SessionOptions(rules=(Rule("bash", "*", "allow"),), max_steps=steps + 2)
        handle = await service.create_session(options)
        marks: list[float] = []
        async for update in handle.send("go", answerer=auto_answerer(True)):
            if isinstance(update, up.ModelResponse):
                marks.append(time.perf_counter())
            elif isinstance(update, up.HookRan):
                HOOK_MS.append(update.duration_ms)
        await handle.close()
        return [b - a for a, b in itertools.pairwise(marks)], (_cpu() - cpu0) / steps
    finally:
        app.close()


def _workspace(where: Path) -> Path:
    root = where / "ws"
    root.mkdir(parents=True, exist_ok=True)
    (root / "README.md").write_text("bench\n")
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    return root


class _Sink:
    def observe_file(self, **_kw: Any) -> None: ...
    def apply_edit(self, **_kw: Any) -> None: ...


async def _hook_alone(root: Path, n: int) -> dict[str, list[float]]:
    sink = _Sink()
    ctx = ToolContext(
        root=root,
        tool_use_id="toolu_bench",
        sink=sink,
        workspace=Workspace(root, MemoryBlobStore(), sink),
        sandbox=SandboxSettings.from_environ(),
    )
    payload: dict[str, object] = {
        "session_id": "bench",
        "cwd": str(root),
        "hook_event_name": "PreToolUse",
        "tool_name": "bash",
        "tool_input": {"command": "true"},
        "tool_use_id": "toolu_bench",
    }
    data = json.dumps(payload).encode()
    warm_cache: dict[str, Any] = {}
    keep_prepared(warm_cache)  # as a session's turn does
    warm_ctx = dataclasses.replace(ctx, cache=warm_cache)
    out: dict[str, list[float]] = {"cold": [], "prepared": [], "bare": [], "tool": []}
    bash = BashTool()
    for _ in range(n):
        t0 = time.perf_counter()
        await bash.run(BashInput(HOOK.command), ctx)
        out["tool"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        await run_hook(HOOK, payload, ctx)
        out["cold"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        await run_hook(HOOK, payload, warm_ctx)
        out["prepared"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        proc = await asyncio.create_subprocess_exec(
            "bash", "-c", HOOK.command, stdin=subprocess.PIPE, cwd=root
        )
        await proc.communicate(data)
        out["bare"].append(time.perf_counter() - t0)
    await release(warm_cache)
    out["prepared"] = out["prepared"][1:]  # the first one set its sandbox up at its start
    return out


def hook_cost(steps: int, rounds: int, latency_ms: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        root = _workspace(where)
        found = availability(SandboxSettings.from_environ(), root)
        print(
            f"sandbox: {'namespaces + overlayfs' if found.active else 'fallback: ' + found.reason}"
        )
        without: list[float] = []
        with_hook: list[float] = []
        cpu: dict[int, list[float]] = {0: [], 1: []}
        for r in range(rounds):
            order = [((), without), ((HOOK,), with_hook)]
            for hooks, into in order if r % 2 == 0 else reversed(order):
                store = where / f"s{r}{len(hooks)}"
                marks, per_step = asyncio.run(_session(root, store, steps, hooks, latency_ms))
                into += marks
                cpu[len(hooks)].append(per_step)
        a, b = statistics.median(without), statistics.median(with_hook)
        ca, cb = statistics.median(cpu[0]), statistics.median(cpu[1])
        print(
            f"step with a bash call, {steps} steps x {rounds} rounds, model latency {latency_ms} "
            f"ms: no hook {a * ms:.1f} ms, with a PreToolUse hook (exit 0) {b * ms:.1f} ms: the "
            f"hook adds {(b - a) * ms:.1f} ms per tool call (median; target < 40 ms); ratio "
            f"{b / a:.2f}; CPU per step (every process) {ca * ms:.1f} / {cb * ms:.1f} ms: "
            f"+{(cb - ca) * ms:.1f} ms"
        )
        first = HOOK_MS[::steps]  # each session's first hook set its sandbox up at its start
        rest = [d for i, d in enumerate(HOOK_MS) if i % steps]
        print(
            "the hook's own time in the step (HookRan.duration_ms, median): "
            f"{statistics.median(rest)} ms in a sandbox prepared ahead, "
            f"{statistics.median(first)} ms for a session's first"
        )
        got = asyncio.run(_hook_alone(root, max(20, steps)))
        m = {k: statistics.median(v) for k, v in got.items()}
        p, c, s, t = m["prepared"], m["cold"], m["bare"], m["tool"]
        print(
            f"the hook alone: run_hook (pipeline + sandbox) {p * ms:.1f} ms in a sandbox prepared "
            f"ahead, {c * ms:.1f} ms set up at its start; the same command spawned bare "
            f"{s * ms:.1f} ms (ratios {p / s:.2f} and {c / s:.2f}); the bash tool running it in "
            f"the same sandbox {t * ms:.1f} ms (ratios {p / t:.2f} and {c / t:.2f})"
        )
        print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


_OVERHEAD = re.compile(r"loop overhead per step \(median of round medians\) ([\d.]+) ms")


def _loop_wall(checkout: Path, steps: int) -> float:
    done = subprocess.run(
        [sys.executable, str(checkout / "bench" / "loop.py"), "--steps", str(steps),
         "--backend", "sqlite", "--rounds", "1"],
        capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": str(checkout)},
    )  # fmt: skip
    found = _OVERHEAD.search(done.stdout)
    assert found is not None, done.stdout + done.stderr
    return float(found.group(1))


def _loop_instructions(checkout: Path, steps: int) -> int:
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
         str(checkout / "bench" / "loop.py"), "--one-session", "sqlite", str(steps)],
        capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": str(checkout)},
    )  # fmt: skip
    found = re.search(r"Collected : (\d+)", done.stderr)
    assert found is not None, done.stderr[-2000:]
    return int(found.group(1))


def no_hook_turn(baseline: Path, steps: int, rounds: int) -> None:
    ours_w: list[float] = []
    base_w: list[float] = []
    for r in range(rounds):
        pair = [(HERE, ours_w), (baseline, base_w)]
        for checkout, into in pair if r % 2 == 0 else reversed(pair):
            into.append(_loop_wall(checkout, steps))
        print(f"  round {r + 1}: ours {ours_w[-1]:.2f} ms, baseline {base_w[-1]:.2f} ms")
    o, b = statistics.median(ours_w), statistics.median(base_w)
    print(
        f"loop overhead per step with no hook configured (bench/loop.py, sqlite, {steps} steps, "
        f"{rounds} alternating runs): ours {o:.2f} ms, baseline {b:.2f} ms; ratio {o / b:.3f} "
        "(target <= 1.02)"
    )
    if shutil.which("valgrind") is None:
        print("(valgrind is not installed: no instruction count)")
        return
    short, long = 100, 400
    counts = {
        name: [_loop_instructions(checkout, n) for n in (short, long)]
        for name, checkout in (("ours", HERE), ("baseline", baseline))
    }
    per = {k: (v[1] - v[0]) / (long - short) for k, v in counts.items()}
    print(
        f"instructions per step with no hook configured (callgrind, {long} - {short} steps): "
        f"ours {per['ours'] / 1e6:.3f}M, baseline {per['baseline'] / 1e6:.3f}M; ratio "
        f"{per['ours'] / per['baseline']:.4f} (target <= 1.02)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", type=Path, help="a checkout without hooks (main)")
    parser.add_argument("--loop-steps", type=int, default=300)
    parser.add_argument("--skip-hook-cost", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--latency-ms",
        type=int,
        default=0,
        help="scripted model latency per response (a real model's lets the next hook's sandbox "
        "be prepared while it answers; 0: none, every process competes for the CPU)",
    )
    args = parser.parse_args()
    if not args.skip_hook_cost:
        hook_cost(args.steps, args.rounds, args.latency_ms)
    if args.baseline is not None:
        no_hook_turn(args.baseline.resolve(), args.loop_steps, args.rounds)


if __name__ == "__main__":
    main()
