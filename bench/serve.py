"""WebSocket server under load: N concurrent sessions on one ``coder-es serve``.

The server runs in its own process (as in production) on an LMDB store in a temporary
workspace. Each session's model is the scripted provider wrapped so that every text delta it
yields carries the wall-clock time it was yielded; the client side (this process) subtracts that
from the time the ``text_delta`` frame arrived. So a latency covers everything in between:
the agent loop, the update queue, JSON encoding, the socket and the client's decoding.

Per run: every session connects, sends one message and reads until ``finished``. Checked for
every session: all ``seq`` numbers from 1 to the last with none missing or repeated, exactly the
expected number of text deltas, and a ``finished`` with reason ``end_turn``.

    python3 bench/serve.py                            baseline (1 session) then 50 sessions
    python3 bench/serve.py --sessions 50 --deltas 50 --pace-ms 5

Printed: median and p99 delta latency for the baseline and the loaded run, their ratio, the
message counts and the wall time. Target: 50 sessions, nothing lost, p99 < 50 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from coder_es.providers import types as pt
from coder_es.providers.base import Provider
from coder_es.providers.scripted import ScriptedProvider


class StampedProvider(Provider):
    """A scripted turn whose displayed deltas are send times; paced like a streaming model."""

    name = "scripted"

    def __init__(self, inner: ScriptedProvider, pace_s: float) -> None:
        self.inner = inner
        self.model = inner.model
        self.pace_s = pace_s

    async def stream(self, request: pt.ModelRequest) -> AsyncIterator[pt.StreamEvent]:
        async for event in self.inner.stream(request):
            if isinstance(event, pt.TextDelta):
                if self.pace_s:
                    await asyncio.sleep(self.pace_s)
                # Only the live delta changes: the recorded block keeps the script's text.
                event = pt.TextDelta(event.index, f"{time.time():.6f};")
            yield event


# ---------------------------------------------------------------------- server process


def run_server(workspace: Path, script: Path, pace_s: float) -> None:
    from coder_es.application import CoderApp
    from coder_es.clients.runtime import ClientRuntime, ProviderChoice
    from coder_es.clients.ws_server import WsServer
    from coder_es.config import load_config

    config = load_config(workspace, {"HOME": str(workspace)})
    app = CoderApp(config.store.to_store_config({}))

    def factory(_name: str, _model: str) -> Provider:
        return StampedProvider(ScriptedProvider.from_file(script, model="bench"), pace_s)

    runtime = ClientRuntime(
        app, workspace, config, ProviderChoice("scripted", str(script)), provider_factory=factory
    )

    async def main() -> None:
        server = await WsServer(runtime, port=0).start()
        print(f"listening on {server.url}", file=sys.stderr, flush=True)
        await server.serve_forever()

    try:
        asyncio.run(main())
    finally:
        app.close()


# ---------------------------------------------------------------------- clients


@dataclass
class SessionResult:
    latencies_ms: list[float]
    messages: int
    deltas: int
    contiguous: bool
    finished: bool


async def one_session(url: str, expected_deltas: int, start: asyncio.Event) -> SessionResult:
    import websockets

    latencies: list[float] = []
    seqs: list[int] = []
    finished = False
    async with websockets.connect(url, max_size=None) as ws:
        json.loads(await ws.recv())  # connected
        await start.wait()
        await ws.send(json.dumps({"type": "send_message", "text": "go"}))
        while True:
            raw = await asyncio.wait_for(ws.recv(), 120)
            now = time.time()
            msg = json.loads(raw)
            if "seq" in msg:
                seqs.append(msg["seq"])
            if msg["type"] == "text_delta":
                latencies.append((now - float(msg["text"].rstrip(";"))) * 1000)
            elif msg["type"] == "finished":
                finished = msg["reason"] == "end_turn"
                break
    return SessionResult(
        latencies,
        len(seqs),
        len(latencies),
        seqs == list(range(1, len(seqs) + 1)),
        finished and len(latencies) == expected_deltas,
    )


async def load(url: str, sessions: int, expected_deltas: int) -> tuple[list[SessionResult], float]:
    start = asyncio.Event()
    tasks = [asyncio.create_task(one_session(url, expected_deltas, start)) for _ in range(sessions)]
    await asyncio.sleep(0.5)  # every client connected and waiting: the turns start together
    began = time.perf_counter()
    start.set()
    results = await asyncio.gather(*tasks)
    return results, time.perf_counter() - began


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def report(label: str, results: list[SessionResult], wall: float) -> tuple[float, float]:
    lat = [x for r in results for x in r.latencies_ms]
    ok = sum(r.contiguous and r.finished for r in results)
    med, p99 = statistics.median(lat), pct(lat, 0.99)
    print(
        f"{label:>12}: sessions={len(results)} complete={ok}/{len(results)} "
        f"messages={sum(r.messages for r in results)} deltas={len(lat)} "
        f"median={med:.2f} ms p99={p99:.2f} ms max={max(lat):.2f} ms wall={wall:.2f} s"
    )
    if ok != len(results):
        print(f"{label:>12}: LOST OR UNFINISHED MESSAGES in {len(results) - ok} session(s)")
    return med, p99


async def bench(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        ws.mkdir()
        text = "".join(f"word{i:04d} " for i in range(args.deltas * 16 // 9 + 1))[
            : args.deltas * 16
        ]
        script = Path(tmp) / "script.json"
        script.write_text(json.dumps({"turns": [{"blocks": [{"type": "text", "text": text}]}]}))
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            os.path.abspath(__file__),
            "--server",
            str(ws),
            str(script),
            str(args.pace_ms / 1000),
            stderr=asyncio.subprocess.PIPE,
        )
        assert proc.stderr is not None
        line = (await proc.stderr.readline()).decode()
        found = re.search(r"ws://\S+", line)
        if found is None:
            print("server did not start:", line, (await proc.stderr.read()).decode())
            return 1
        url = found.group(0)
        try:
            print(
                f"deltas per turn={args.deltas} pace={args.pace_ms} ms store=lmdb "
                f"(server in its own process)"
            )
            base, base_wall = await load(url, 1, args.deltas)
            b_med, b_p99 = report("baseline x1", base, base_wall)
            loaded, wall = await load(url, args.sessions, args.deltas)
            med, p99 = report(f"load x{args.sessions}", loaded, wall)
            print(f"ratio to baseline: median {med / b_med:.2f}x, p99 {p99 / b_p99:.2f}x")
            lost = sum(not (r.contiguous and r.finished) for r in loaded + base)
            verdict = "PASS" if lost == 0 and p99 < 50 else "FAIL"
            print(f"target (nothing lost, p99 < 50 ms at x{args.sessions}): {verdict}")
            return 0 if verdict == "PASS" else 1
        finally:
            proc.terminate()
            await proc.wait()


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--server":
        run_server(Path(sys.argv[2]), Path(sys.argv[3]), float(sys.argv[4]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--deltas", type=int, default=50, help="text deltas per turn")
    parser.add_argument("--pace-ms", type=float, default=5.0, help="model time between deltas")
    return asyncio.run(bench(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
