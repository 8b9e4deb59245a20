"""Harness-session benchmark: what running another agent CLI through coder-es costs.

Three figures, measured in the same run against the tests' fake model server (50 ms latency
per model request):

1. a 10-call Claude Code turn through coder-es (``coder-es run --harness claude``: sandbox
   transaction, recording proxy, stream decoding, per-call attribution, apply, events) vs the
   same CLI run directly on the same script: wall-clock medians and their ratio (target
   <= 1.15x). Both the whole command (a fresh Python process) and the turn alone (in-process,
   without the interpreter's start-up) are shown;
2. the recording proxy's overhead per model request: the same request straight to the fake
   server and through the proxy (no latency), median difference (target < 2 ms);
3. applying a turn's changes (10 files) in a 100,000-file workspace: the transaction's plan and
   commit plus the per-call attribution, after a real sandboxed command wrote them (target
   < 100 ms).

Run:  python3 bench/harness.py [--runs 5] [--files 100000] [--skip-turn] [--skip-apply]
      [--baseline OTHER_CHECKOUT] [--cold-cache]
Needs the pinned CLIs (``npm ci --prefix .ci/harness-clis``) for figure 1.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "harness"))

from fake_model import FakeModel, Script  # noqa: E402

from coder_es.harness.proxy import ForwardUpstream, RecordingProxy  # noqa: E402

BIN = REPO / ".ci" / "harness-clis" / "node_modules" / ".bin"
LATENCY_S = 0.05


def ten_calls(workspace: Path) -> Script:
    steps: list[tuple[str, ...]] = []
    for i in range(5):
        steps.append(("write", str(workspace / f"note{i}.md"), f"note {i}\n"))
        steps.append(("shell", f"echo {i} > made{i}.txt"))
    return Script(steps=steps, latency_s=LATENCY_S)


CACHE = Path(tempfile.mkdtemp(prefix="bench-harness-cache-"))
atexit.register(shutil.rmtree, CACHE, True)
SHARED_CACHE = True  # --cold-cache: each run's own, empty (every run compiles that code again)
"""One user cache for every run (coder-es's generated-code cache, ``coder_es.cli.codecache``,
filled by the warm-up as by any earlier run of an installed coder-es; a fresh HOME per run
would otherwise leave it cold every time). The direct runs get the same variable."""


def claude_env(home: Path, model: FakeModel, repo: Path = REPO) -> dict[str, str]:
    # As installed: with bytecode caches (an environment that forbids writing them makes every
    # coder-es run compile its modules again, ~0.7 s here, which no installed copy pays).
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {
        **environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(CACHE if SHARED_CACHE else home / ".cache"),
        "PYTHONPATH": str(repo),
        "ANTHROPIC_BASE_URL": model.url,
        "ANTHROPIC_API_KEY": "sk-ant-bench",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "IS_SANDBOX": "1",
    }


def fresh(base: Path, name: str) -> tuple[Path, Path]:
    ws = Path(tempfile.mkdtemp(prefix=f"{name}-ws-", dir=base))
    home = Path(tempfile.mkdtemp(prefix=f"{name}-home-", dir=base))
    return ws, home


def timed(argv: list[str], cwd: Path, env: dict[str, str], base: Path) -> tuple[int, float]:
    """Run ``argv``; its exit code and wall time, from its start to its exit.

    Output to files, not pipes: a process is done when it exits, not when every process it
    left behind has closed a pipe (a CLI run directly leaves some; the sandbox kills them).
    Its exit is waited for, not polled: ``subprocess.run(timeout=...)`` polls with sleeps that
    grow to 50 ms, so a run's end was seen up to 50 ms late (noise of the size of the
    differences measured); the timeout is a timer that kills it instead."""
    with tempfile.NamedTemporaryFile(dir=base, delete=False) as out:
        t = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        watchdog = threading.Timer(300, proc.kill)
        watchdog.start()
        try:
            code = proc.wait()
        finally:
            watchdog.cancel()
        return code, time.perf_counter() - t


def turn_direct(base: Path) -> float:
    ws, home = fresh(base, "direct")
    with FakeModel(ten_calls(ws)) as model:
        code, took = timed(
            [
                str(BIN / "claude"),
                "-p",
                "--output-format",
                "stream-json",
                "--verbose",
                "--dangerously-skip-permissions",
                "--",
                "go",
            ],
            ws,
            claude_env(home, model),
            base,
        )
    assert code == 0 and (ws / "made4.txt").exists(), "the turn failed"
    return took


def turn_coder_es(base: Path, repo: Path = REPO) -> float:
    """``repo``: whose coder-es runs (``--baseline``: another checkout's, in the same run)."""
    ws, home = fresh(base, "coder-es")
    with FakeModel(ten_calls(ws)) as model:
        code, took = timed(
            [
                sys.executable,
                "-m",
                "coder_es.cli.main",
                "--workspace",
                str(ws),
                "run",
                "--harness",
                "claude",
                "--yes",
                "go",
            ],
            ws,
            claude_env(home, model, repo),
            base,
        )
    assert code == 0 and (ws / "made4.txt").exists(), "the turn failed"
    return took


def turn_in_process(base: Path) -> float:
    """The turn alone: the harness machinery without the interpreter's start-up."""
    from coder_es.application import CoderApp
    from coder_es.harness.runner import HarnessSession
    from coder_es.harness.spec import parse_harness
    from coder_es.store.config import StoreConfig

    ws, home = fresh(base, "inproc")
    with FakeModel(ten_calls(ws)) as model:
        env = claude_env(home, model)
        app = CoderApp(StoreConfig(backend="lmdb", path=ws / ".coder-es"))
        try:
            session = HarnessSession.create(
                app,
                ws,
                parse_harness("claude"),
                yes=True,
                environ=env,
                store_path=(ws / ".coder-es").resolve(),
            )

            async def turn() -> None:
                async for _ in session.send("go"):
                    pass

            t = time.perf_counter()
            asyncio.run(turn())
            took = time.perf_counter() - t
        finally:
            app.close()
    assert (ws / "made4.txt").exists()
    return took


_CLIENT = r"""
import http.client, json, statistics, sys, time
from urllib.parse import urlsplit
n = int(sys.argv[1])
body = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
out = {}
for url in sys.argv[2:] * 2:
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port)
    times = out.setdefault(url, [])
    for _ in range(n // 2):
        t = time.perf_counter()
        conn.request("POST", u.path + "/v1/messages", body, {"content-type": "application/json"})
        r = conn.getresponse(); r.read()
        times.append(time.perf_counter() - t)
    conn.close()
print(json.dumps({k: statistics.median(v) * 1000 for k, v in out.items()}))
"""


def proxy_overhead(requests: int) -> tuple[float, float, float]:
    """The same request straight to the model and through the proxy, from a client process (as
    a harness is), the model in a process of its own (as a remote endpoint is)."""
    server = subprocess.Popen(
        [sys.executable, str(REPO / "tests" / "harness" / "fake_model.py")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        model_url = server.stdout.readline().strip()

        async def measure() -> dict[str, float]:
            proxy = await RecordingProxy(ForwardUpstream(model_url)).start()
            via = proxy.base_url
            cpu = time.process_time()
            try:
                client = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-c",
                    _CLIENT,
                    str(requests),
                    model_url,
                    via,
                    stdout=asyncio.subprocess.PIPE,
                )
                out, _ = await client.communicate()
            finally:
                cpu = time.process_time() - cpu
                await proxy.aclose()
            medians = json.loads(out)
            # The proxy's own CPU per request it forwarded (load-independent: the client and
            # the model are other processes).
            per_request = cpu / max(len(proxy.exchanges), 1) * 1000
            return {"direct": medians[model_url], "proxy": medians[via], "cpu": per_request}

        got = asyncio.run(measure())
    finally:
        server.kill()
        server.wait()
    return got["direct"], got["proxy"], got["cpu"]


def apply_figure(base: Path, files: int, runs: int) -> tuple[list[float], list[float], list[float]]:
    """Plan + commit + attribution of a turn that changed 10 files, in a ``files``-file tree.

    The runs alternate with a baseline in the same run: the renamed files' directories fsynced
    one after the other (as before ``sync_dirs`` synced them at once)."""
    from coder_es.harness.files import Attribution
    from coder_es.sandbox import Transaction
    from coder_es.sandbox.namespaces import SandboxSpec, read_report, wrap
    from coder_es.store.blobs import MemoryBlobStore
    from coder_es.workspace import atomic

    root = base / "big"
    for i in range(files):
        d = root / f"pkg{i // 100:04d}"
        if i % 100 == 0:
            d.mkdir(parents=True, exist_ok=True)
        (d / f"mod{i % 100:03d}.py").write_text(f"VALUE_{i} = {i}\n")
    times: list[float] = []
    serial: list[float] = []  # the baseline: one directory fsync after the other
    own: list[float] = []  # the attribution's part: walks of the upper directory, reconciling
    threads = atomic.SYNC_THREADS
    for run in range(runs * 2):
        atomic.SYNC_THREADS = threads if run % 2 == 0 else 1
        blobs = MemoryBlobStore()
        tx = Transaction.begin(root)
        spec = SandboxSpec(root, root, tx.upper, tx.work, tx.path / "mounts.fstab")
        dirs = max(files // 100, 1)
        edits = "; ".join(
            f"echo changed {run} >> pkg{k * dirs // 10:04d}/mod00{k}.py" for k in range(10)
        )
        r, w = os.pipe()
        subprocess.run(wrap(spec, ["/bin/sh", "-c", edits]), stdin=w, cwd=root, check=True)
        os.close(w)
        read_report(r)
        attribution = Attribution(root, tx.upper, blobs.put)
        t = time.perf_counter()
        attribution.boundary("call")
        t_walk = time.perf_counter() - t
        plan = tx.plan(root, {}, blobs)
        outcome = tx.commit(plan, root, blobs)
        t2 = time.perf_counter()
        per_call = attribution.files_changed(outcome.applied, "call")
        end = time.perf_counter()
        (times if run % 2 == 0 else serial).append((end - t) * 1000)
        own.append((t_walk + end - t2) * 1000)
        tx.close()
        assert len(per_call["call"]) == 10, per_call
    atomic.SYNC_THREADS = threads
    return times, own, serial


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--skip-turn", action="store_true")
    parser.add_argument("--skip-apply", action="store_true")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="another checkout of coder-es whose `run --harness` is timed too, interleaved "
        "(before/after figures from the same run)",
    )
    parser.add_argument(
        "--cold-cache",
        action="store_true",
        help="no user cache shared between runs: each coder-es run compiles dataclasses' code",
    )
    args = parser.parse_args()
    global SHARED_CACHE
    SHARED_CACHE = not args.cold_cache
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-harness-") as tmp:
        base = Path(tmp)
        direct_ms, via_ms, cpu_ms = proxy_overhead(args.requests)
        results["proxy"] = {
            "direct_ms": direct_ms,
            "proxy_ms": via_ms,
            "overhead_ms": via_ms - direct_ms,
            "proxy_cpu_ms": cpu_ms,
        }
        print(
            f"proxy: direct {direct_ms:.2f} ms, through the proxy {via_ms:.2f} ms per request "
            f"(median of {args.requests}): overhead {via_ms - direct_ms:.2f} ms; the proxy's "
            f"own CPU {cpu_ms:.2f} ms per request (target < 2 ms)"
        )
        if not args.skip_turn:
            if not (BIN / "claude").exists():
                print("turn: skipped (npm ci --prefix .ci/harness-clis first)")
            else:
                direct, cli, inproc, before = [], [], [], []
                turn_direct(base)  # warm the file cache
                turn_coder_es(base)  # ...and the bytecode and generated-code caches
                if args.baseline:
                    turn_coder_es(base, args.baseline.resolve())
                for run in range(args.runs):
                    direct.append(turn_direct(base))
                    # The two commands take turns to follow the direct run (which may leave
                    # processes behind that still use a core for a while).
                    if args.baseline and run % 2:
                        before.append(turn_coder_es(base, args.baseline.resolve()))
                    cli.append(turn_coder_es(base))
                    if args.baseline and not run % 2:
                        before.append(turn_coder_es(base, args.baseline.resolve()))
                    inproc.append(turn_in_process(base))
                d, c, i = (statistics.median(x) for x in (direct, cli, inproc))
                results["turn"] = {"direct_s": d, "coder_es_s": c, "in_process_s": i}
                print(
                    f"10-call Claude Code turn, 50 ms model (median of {args.runs}): direct "
                    f"{d:.2f} s; coder-es run --harness {c:.2f} s (x{c / d:.3f}); the turn "
                    f"in-process {i:.2f} s (x{i / d:.3f}) (target <= 1.15x)"
                )
                if before:
                    b = statistics.median(before)
                    results["turn"]["baseline_s"] = b
                    print(
                        f"  baseline {args.baseline}: coder-es run --harness {b:.2f} s "
                        f"(x{b / d:.3f}); this checkout x{c / b:.3f} of it"
                    )
        if not args.skip_apply:
            times, own, serial = apply_figure(base, args.files, args.runs)
            m, o, b = statistics.median(times), statistics.median(own), statistics.median(serial)
            results["apply_ms"] = m
            results["apply_serial_fsync_ms"] = b
            results["attribution_ms"] = o
            print(
                f"apply 10 changed files (10 directories) in a {args.files}-file workspace: "
                f"{m:.1f} ms median (runs: {', '.join(f'{t:.1f}' for t in times)}); with the "
                f"directories fsynced one by one (before) {b:.1f} ms (x{m / b:.2f}); of which "
                f"the per-call attribution {o:.1f} ms, the rest the transaction's journal and "
                "durable apply (shared with bash) (target < 100 ms)"
            )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
