"""Replay speed: a 1,000-step cassette replayed in verify mode (target: under 2 s).

A session of N model steps (default 1000: N-1 turns that each call one read-only tool, ``read``
or ``grep`` in turn, then a final answer) is recorded with the scripted provider on a small
workspace, in memory, and exported as a cassette. The cassette is then replayed in verify mode
(tools served from the recording) ``--rounds`` times.

    python3 bench/replay.py                    1000 steps, 5 rounds
    python3 bench/replay.py --steps 200 --rounds 3 --live

Printed: the recording's wall time (the baseline, measured in this run), the median replay time,
steps/s, events/s and the ratio replay / recording; ``--live`` also times live mode.
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

from coder_es.application import CoderApp
from coder_es.providers.scripted import ScriptedProvider
from coder_es.service.api import AgentService, SessionOptions
from replay.cassette import dumps, export_session, loads
from replay.engine import ReplayOptions, replay_cassette

FILES = {
    "app/main.py": "import util\n\n\ndef main():\n    return util.helper(2)\n",
    "app/util.py": "def helper(x):\n    return x * 21\n",
    "README.md": "# bench\n",
}


def turns(steps: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(steps - 1):
        if i % 2:
            call = {"type": "tool_use", "name": "grep", "input": {"pattern": f"helper|{i}"}}
        else:
            call = {"type": "tool_use", "name": "read", "input": {"path": "app/util.py"}}
        out.append(
            {
                "blocks": [{"type": "text", "text": f"step {i}"}, call],
                "usage": {"input_tokens": 100 + i, "output_tokens": 10},
            }
        )
    out.append({"blocks": [{"type": "text", "text": "done"}]})
    return out


async def _record(root: Path, app: CoderApp, steps: int) -> str:
    provider = ScriptedProvider(turns(steps), model="bench")
    service = AgentService(app, root, provider_factory=lambda _n, _m: provider)
    handle = await service.create_session(SessionOptions(max_steps=steps))
    async for _update in handle.send("go"):
        pass
    await handle.close()
    return handle.id


def record(steps: int) -> tuple[str, float]:
    """The cassette text of an N-step session, and how long recording it took."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for rel, text in FILES.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        app = CoderApp()
        started = time.perf_counter()
        sid = asyncio.run(_record(root, app, steps))
        wall = time.perf_counter() - started
        text = dumps(export_session(app, sid, options={"max_steps": steps}))
        app.close()
    return text, wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--live", action="store_true", help="also time live mode")
    args = parser.parse_args()
    text, record_s = record(args.steps)
    cassette = loads(text, f"bench-{args.steps}.cassette.jsonl")
    events = len(cassette.events)
    print(
        f"recorded {args.steps} steps ({events} events, {len(text) / 1e6:.1f} MB cassette) "
        f"in {record_s:.2f} s (baseline, this run)"
    )
    modes = ["verify", "live"] if args.live else ["verify"]
    ok = True
    for mode in modes:
        times = []
        for _ in range(args.rounds):
            started = time.perf_counter()
            report = replay_cassette(cassette, ReplayOptions(mode=mode))
            times.append(time.perf_counter() - started)
            if not report.ok:
                print(report.render())
                return 1
        median = statistics.median(times)
        verdict = "met)" if median < 2 else "MISSED)"
        target = f" (target < 2 s: {verdict}" if mode == "verify" else ""
        ok = ok and (mode != "verify" or median < 2)
        print(
            f"{mode}: median {median:.3f} s over {args.rounds} rounds{target}; "
            f"{args.steps / median:,.0f} steps/s, {events / median:,.0f} events/s; "
            f"ratio replay / recording = {median / record_s:.2f}"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
