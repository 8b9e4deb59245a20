"""Harness replay benchmark: a live replay of a harness session against recording it.

Two figures, measured in the same run with the real Claude Code CLI and the tests' fake model
(no latency: the strictest comparison, the replay's matching and serving against a model that
answers at once):

1. a 20-exchange session (19 tool calls, then the answer) recorded in-process
   (``HarnessSession.send``: sandbox, recording proxy, model) and replayed live
   (``replay.harness.live``: the same CLI in a scratch workspace, the proxy serving the recorded
   answers); wall-clock medians without the CLI's own start-up (the time to its first model
   request, measured on both sides), and their ratio (target <= 1.2x);
2. matching a request to its recording (``ServingUpstream.match``: normalizing the body,
   its digest, the lookup), median per request over the session's own requests (target < 1 ms),
   against parsing the same body as JSON once (``json.loads``) as the baseline.

Run:  python3 bench/harness_replay.py [--runs 3]
Needs the pinned CLIs (``npm ci --prefix .ci/harness-clis``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "harness"))
sys.path.insert(0, str(REPO / "bench"))

from fake_model import FakeModel, Script  # noqa: E402
from harness import claude_env, fresh  # noqa: E402

from coder_es.application import CoderApp  # noqa: E402
from coder_es.harness.runner import HarnessSession  # noqa: E402
from coder_es.harness.serve import RequestNormalizer, ServingUpstream  # noqa: E402
from coder_es.harness.spec import parse_harness  # noqa: E402
from coder_es.store.config import StoreConfig  # noqa: E402
from replay.cassette import export_session  # noqa: E402
from replay.harness import areplay_harness, exchanges_of, recorded_turns  # noqa: E402

CALLS = 19


def twenty_exchanges(workspace: Path) -> Script:
    steps: list[tuple[str, ...]] = []
    for i in range(CALLS):
        if i % 2:
            steps.append(("shell", f"echo {i} > made{i}.txt"))
        else:
            steps.append(("write", str(workspace / f"note{i}.md"), f"note {i}\n"))
    return Script(steps=steps)


def record(base: Path) -> tuple[float, float, Any, int, Path]:
    """(wall, start-up, cassette, model requests, the CLI's HOME) of recording one session."""
    ws, home = fresh(base, "record")
    with FakeModel(twenty_exchanges(ws)) as model:
        first: list[float] = []
        model.on_request = lambda n, _body: first.append(time.perf_counter()) if n == 1 else None
        env = claude_env(home, model)
        store = ws.parent / f"{ws.name}-store"
        app = CoderApp(StoreConfig(backend="lmdb", path=store))
        try:
            session = HarnessSession.create(
                app, ws, parse_harness("claude"), yes=True, environ=env, store_path=store
            )

            async def turn() -> None:
                async for _ in session.send("go"):
                    pass

            t = time.perf_counter()
            asyncio.run(turn())
            took = time.perf_counter() - t
            cassette = export_session(app, session.id)
        finally:
            app.close()
        requests = len(model.requests)
    assert (ws / f"made{CALLS - 2}.txt").exists(), "the recorded turn failed"
    return took, first[0] - t, cassette, requests, home


def replay(cassette: Any, env: dict[str, str]) -> tuple[float, float, float]:
    """(wall, start-up, median match ms) of replaying it live."""
    import os

    saved = dict(os.environ)
    os.environ.update(env)  # the CLI's HOME and PATH, as the recording had them
    try:
        t = time.perf_counter()
        report = asyncio.run(areplay_harness(cassette, "live"))
        took = time.perf_counter() - t
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert report.ok, report.render()
    notes = " ".join(report.notes)
    startup = float(re.search(r"all turns\): ([0-9.]+) s", notes).group(1))  # type: ignore[union-attr]
    median = float(re.search(r"median ([0-9.]+) ms", notes).group(1))  # type: ignore[union-attr]
    return took, startup, median


def matching(cassette: Any, rounds: int = 50) -> tuple[float, float, float]:
    """Median ms per match (wall, CPU of the thread), per json.loads of the same bodies."""
    turn = recorded_turns(cassette.events)[0]
    exchanges = exchanges_of(cassette, turn)
    normalizer = RequestNormalizer.for_paths("claude-code", cassette.workspace, "/tmp/other/ws")
    matched: list[float] = []
    cpu: list[float] = []
    parsed: list[float] = []
    for _ in range(rounds):
        upstream = ServingUpstream(exchanges, normalizer)
        for x in exchanges:
            c = time.thread_time()
            found = upstream.match(x.method, x.path, x.request)
            cpu.append((time.thread_time() - c) * 1000)
            assert found is not None
            upstream._left.remove(found)  # served, as ServingUpstream.send does
            t = time.perf_counter()
            json.loads(x.request)
            parsed.append((time.perf_counter() - t) * 1000)
        matched += upstream.match_ms
    return statistics.median(matched), statistics.median(cpu), statistics.median(parsed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="coder-es-bench-replay-"))
    recorded: list[float] = []
    replayed: list[float] = []
    live_match: list[float] = []
    cassette = None
    for _ in range(args.runs):
        wall, startup, cassette, requests, home = record(base)
        recorded.append(wall - startup)
        # The same set-up (its HOME) as the recording; a model that must not be called.
        with FakeModel(Script(steps=[])) as idle:
            env = claude_env(home, idle)
            r_wall, r_startup, median = replay(cassette, env)
            assert not idle.requests, "the replay called the model"
        replayed.append(r_wall - r_startup)
        live_match.append(median)
        print(
            f"  run: recorded {wall:.2f} s (start-up {startup:.2f} s, {requests} requests), "
            f"replayed {r_wall:.2f} s (start-up {r_startup:.2f} s)"
        )
    assert cassette is not None
    rec, rep = statistics.median(recorded), statistics.median(replayed)
    print(f"1. 20-exchange session without the CLI's start-up, median of {args.runs}:")
    print(f"   recording {rec:.3f} s, live replay {rep:.3f} s: ratio {rep / rec:.2f}x (<= 1.2x)")
    per_match, per_match_cpu, per_parse = matching(cassette)
    print("2. matching a request to its recording, median per request:")
    print(
        f"   {per_match:.3f} ms wall, {per_match_cpu:.3f} ms CPU (< 1 ms; in the live "
        f"replays: {statistics.median(live_match):.3f} ms wall); json.loads of the same body "
        f"{per_parse:.3f} ms: ratio {per_match / per_parse:.2f}x"
    )


if __name__ == "__main__":
    main()
