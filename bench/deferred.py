"""Deferred permission decisions (issue 34): what parking a turn and resuming it costs.

    python3 bench/deferred.py                          all three parts, default sizes
    python3 bench/deferred.py --rounds 20 --sessions 10000 --waiting 100

Printed (medians; each baseline measured in the same run, on the same kind of store):

- ``in-process``: one turn whose write (outside the workspace: it asks) is answered in the same
  process (``allow`` at the question) against the same turn parked (``run --defer``), answered
  through a second ``CoderApp`` on the same store (another process's view: ``approve``), and
  continued by a freshly opened session handle (``run --session S``). The difference is what
  parking and resuming add beyond the tool's own run. Target: < 150 ms.
- ``processes``: the same through the CLI, as a user runs it: ``run --yes`` (one process)
  against ``run --defer`` + ``approve`` + ``run --session`` (three processes). Most of the
  difference is the start-up of the two extra processes.
- ``pending``: ``coder-es pending``'s query (``service.waiting.pending``) on a store of
  ``--sessions`` sessions of which ``--waiting`` are parked, against listing the sessions
  (``CoderApp.list_sessions``, what ``coder-es sessions`` reads) on the same store. Target:
  10,000 sessions, 100 waiting, < 100 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from coder_es.application import CoderApp
from coder_es.domain.session import Session
from coder_es.providers.scripted import ScriptedProvider
from coder_es.service.api import AgentService, SessionOptions, auto_answerer
from coder_es.service.waiting import answer, pending, questions_in
from coder_es.service.waiting_index import rebuild
from coder_es.store.config import StoreConfig

REPO = Path(__file__).resolve().parent.parent


def _turns(target: Path) -> list[dict[str, Any]]:
    call = {
        "type": "tool_use",
        "id": "w1",
        "name": "write",
        "input": {"path": str(target), "content": "hi\n"},
    }
    return [{"blocks": [call]}, {"blocks": [{"type": "text", "text": "done"}]}]


def _service(app: CoderApp, root: Path, turns: list[dict[str, Any]]) -> AgentService:
    def factory(name: str, model: str) -> ScriptedProvider:
        return ScriptedProvider(list(turns), model="bench")

    return AgentService(app, root, provider_factory=factory)


async def _drain(stream: Any) -> None:
    async for _ in stream:
        pass


async def _same_process(base: Path, i: int) -> float:
    root, store = base / f"same{i}", base / f"same{i}.store"
    root.mkdir()
    app = CoderApp(StoreConfig("sqlite", store))
    try:
        turns = _turns(base / f"same{i}.out")
        started = time.perf_counter()
        handle = await _service(app, root, turns).create_session(SessionOptions())
        await _drain(handle.send("go", answerer=auto_answerer(True)))
        await handle.close()
        took = time.perf_counter() - started
        assert handle.outcome is not None and handle.outcome.reason == "end_turn"
        return took
    finally:
        app.close()


async def _parked(base: Path, i: int) -> float:
    root, store = base / f"park{i}", base / f"park{i}.store"
    root.mkdir()
    target = base / f"park{i}.out"
    turns = _turns(target)
    app = CoderApp(StoreConfig("sqlite", store))
    try:
        started = time.perf_counter()
        handle = await _service(app, root, turns).create_session(SessionOptions())
        await _drain(handle.send("go", answerer=auto_answerer(False, defer=True)))
        await handle.close()
        assert handle.outcome is not None and handle.outcome.reason == "waiting"
        sid = handle.id
        # Another process: its own application on the same store.
        other = CoderApp(StoreConfig("sqlite", store))
        try:
            answer(other, sid, [], decision="allow", by={"client": "bench"})
        finally:
            other.close()
        third = CoderApp(StoreConfig("sqlite", store))
        try:
            resumed = await _service(third, root, turns).open_session(sid, SessionOptions())
            await _drain(resumed.resume(answerer=auto_answerer(False, defer=True)))
            await resumed.close()
            assert resumed.outcome is not None and resumed.outcome.reason == "end_turn"
        finally:
            third.close()
        took = time.perf_counter() - started
        assert target.read_text() == "hi\n"
        return took
    finally:
        app.close()


def _cli(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, float]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "coder_es.cli.main", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, time.perf_counter() - started


def _processes(base: Path, i: int) -> tuple[float, float]:
    root = base / f"cli{i}"
    root.mkdir()
    script = root / "turns.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["CODER_ES_BACKEND"] = "sqlite"
    script.write_text(json.dumps({"turns": _turns(base / f"cli{i}.yes")}))
    env["CODER_ES_STORE"] = str(base / f"cli{i}.yes.store")
    code, one = _cli(["run", "go", "--script", str(script), "--yes"], root, env)
    assert code == 0, code
    script.write_text(json.dumps({"turns": _turns(base / f"cli{i}.defer")}))
    env["CODER_ES_STORE"] = str(base / f"cli{i}.defer.store")
    code, a = _cli(["run", "go", "--script", str(script), "--defer"], root, env)
    assert code == 3, code
    listed = subprocess.run(
        [sys.executable, "-m", "coder_es.cli.main", "pending", "--json"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    sid = json.loads(listed.stdout.splitlines()[0])["session"]
    code, b = _cli(["approve", sid], root, env)
    assert code == 0, code
    code, c = _cli(["run", "--session", sid, "--script", str(script)], root, env)
    assert code == 0, code
    return one, a + b + c


def _park(s: Session, cid: str) -> None:
    call: dict[str, Any] = {"type": "tool_use", "id": cid, "name": "write", "input": {"path": "/x"}}
    node = s.record_model_response(
        blocks=[call], stop_reason="tool_use", usage={}, provider="scripted", model="b"
    )
    s.request_tool_call(node=node, tool_use_id=cid, name="write", input=call["input"])
    s.defer_permission(
        tool_use_id=cid,
        tool="write",
        subject="/x",
        matched_rule="outside_workspace",
        reason="outside",
        source="run --defer",
        suggested_pattern="/x",
    )
    s.park_turn(tool_use_ids=[cid], by={"client": "bench"})


def _fill(store: Path, sessions: int, waiting: int) -> CoderApp:
    app = CoderApp(StoreConfig("sqlite", store))
    every = max(1, sessions // max(1, waiting))
    parked = 0
    batch: list[Session] = []
    for i in range(sessions):
        s = Session.start(workspace="/w", model="bench", title=f"s{i}")
        s.add_user_message([{"type": "text", "text": "go"}])
        if i % every == 0 and parked < waiting:
            _park(s, f"c{i}")
            parked += 1
        batch.append(s)
        if len(batch) == 500:
            app.save(*batch)  # one transaction per 500 sessions: filling is not what is timed
            batch = []
    if batch:
        app.save(*batch)
    return app


def _folded(app: CoderApp) -> list[Any]:
    """The lookup ``pending`` made before the index: every session that ever parked (the
    topic index of ``TurnParked``) loaded and folded. The baseline of the same run."""
    out: list[Any] = []
    for sid in app.sessions_with(Session.TurnParked):
        out += questions_in(app.session_events(sid))
    return out


def _timed(fn: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def _pending_part(base: Path, args: argparse.Namespace) -> None:
    started = time.perf_counter()
    app = _fill(base / "many.store", args.sessions, args.waiting)
    fill = time.perf_counter() - started
    try:
        folded, rebuilt, steady, caught, listing = [], [], [], [], []
        for i in range(args.rounds):
            took, found = _timed(lambda: _folded(app))
            folded.append(took)
            assert len(found) == args.waiting + i, len(found)
            rebuild(app)  # the whole index from the log, as a first read does
            took, found = _timed(lambda: pending(app))
            rebuilt.append(took)
            took, found = _timed(lambda: pending(app))  # nothing new since
            steady.append(took)
            assert len(found) == args.waiting + i, len(found)
            # One more session parks (another process, say): the read catches up with it.
            extra = Session.start(workspace="/w", model="bench", title=f"extra{i}")
            extra.add_user_message([{"type": "text", "text": "go"}])
            _park(extra, f"x{i}")
            app.save(extra)
            took, found = _timed(lambda: pending(app))
            caught.append(took)
            assert len(found) == args.waiting + i + 1, len(found)
            listing.append(_timed(app.list_sessions)[0])
        f, r, st, c, ls = map(_median_ms, (folded, rebuilt, steady, caught, listing))
        cpu = resource.getrusage(resource.RUSAGE_SELF)
        print(
            f"pending: {args.sessions} sessions, {args.waiting} waiting (filled in {fill:.1f} s), "
            f"medians of {args.rounds} rounds: index read with nothing new {st:.1f} ms, after one "
            f"more session parked {c:.1f} ms, index rebuilt from the whole log {r:.1f} ms; "
            f"baseline (folding every parked session, the lookup before the index) {f:.1f} ms; "
            f"listing the sessions {ls:.1f} ms. Ratios: steady/fold {st / f:.3f}, "
            f"caught-up/fold {c / f:.3f}, rebuild/fold {r / f:.2f} (target < 100 ms); "
            f"process CPU so far {cpu.ru_utime + cpu.ru_stime:.1f} s"
        )
    finally:
        app.close()


def _median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--cli-rounds", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--waiting", type=int, default=100)
    parser.add_argument("--only", choices=["pending"], help="only the pending part")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        if args.only == "pending":
            _pending_part(base, args)
            return 0
        same, parked = [], []
        for i in range(args.rounds):
            same.append(asyncio.run(_same_process(base, i)))
            parked.append(asyncio.run(_parked(base, i)))
        s, p = _median_ms(same), _median_ms(parked)
        print(
            f"in-process ({args.rounds} rounds, sqlite): answered in the same process "
            f"{s:.1f} ms, parked + answered by another app + resumed {p:.1f} ms: "
            f"extra {p - s:.1f} ms (ratio {p / s:.2f}; target < 150 ms extra)"
        )
        ones, threes = [], []
        for i in range(args.cli_rounds):
            one, three = _processes(base, i)
            ones.append(one)
            threes.append(three)
        o, t = _median_ms(ones), _median_ms(threes)
        print(
            f"processes ({args.cli_rounds} rounds): run --yes {o:.0f} ms; run --defer + approve + "
            f"run --session {t:.0f} ms: extra {t - o:.0f} ms (ratio {t / o:.2f}; two more "
            "process start-ups included)"
        )
        _pending_part(base, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
