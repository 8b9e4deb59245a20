"""kill -9 of workers: another worker takes the session over and finishes it from its events."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("procrastinate", reason="the fleet queue needs procrastinate (postgres extra)")

from backends import PG, REPO, make_config, requires_postgres
from fleet_helpers import create_sessions, workspace

from coder_es.application import CoderApp
from coder_es.fleet.audit import audit_sessions
from coder_es.fleet.queue import FleetQueue
from coder_es.fleet.summary import all_events, rebuild

pytestmark = requires_postgres


def _worker(root: Path, schema: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        **PG,
        "POSTGRES_SCHEMA": schema,
        "CODER_ES_BACKEND": "postgres",
        "PYTHONPATH": str(REPO),
    }
    args = [sys.executable, "-m", "coder_es.cli.main", "--workspace", str(root), "worker"]
    args += ["--concurrency", "2", "--heartbeat", "0.3", "--stall-timeout", "2"]
    return subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def test_a_killed_workers_sessions_are_finished_by_another(tmp_path: Path, pg_schema: str) -> None:
    config = make_config("postgres", tmp_path, pg_schema)
    # Step 0 runs a tool; the closing turn is slow, so a kill lands while sessions are mid-turn.
    turns = [
        {"blocks": [{"type": "tool_use", "name": "bash", "input": {"command": "echo x >> t"}}]},
        # Long enough that the kill, sent once both tools have run, lands inside it under load.
        {"blocks": [{"type": "text", "text": "done"}], "delay_ms": 5000},
    ]
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"turns": turns}))
    spaces = [workspace(tmp_path, f"w{i}") for i in range(2)]
    jobs = asyncio.run(create_sessions(config, spaces, script))
    first = _worker(tmp_path, pg_schema)
    second: subprocess.Popen[bytes] | None = None

    async def drive() -> int:
        nonlocal second
        async with FleetQueue(config) as queue:
            await queue.enqueue_many(jobs)
            deadline = time.monotonic() + 60
            while (await queue.counts()).doing < 2:  # the first worker has both sessions
                assert time.monotonic() < deadline, "the first worker never took the jobs"
                await asyncio.sleep(0.05)
            # Kill once both sessions' tools have run (their files are on disk), inside the slow
            # closing turn: a fixed sleep raced a loaded machine, where a tool could be cut
            # midway (recorded as interrupted, never re-run) and its file never written.
            while not all((ws / "t").exists() for ws in spaces):
                assert time.monotonic() < deadline, "the tools never ran"
                await asyncio.sleep(0.02)
            first.send_signal(signal.SIGKILL)
            first.wait()
            second = _worker(tmp_path, pg_schema)
            while (counts := await queue.counts()).open:
                assert time.monotonic() < deadline, f"not finished: {counts}"
                await asyncio.sleep(0.1)
            assert counts.succeeded == 2 and counts.failed == 0
            rows = await queue.connector.execute_query_all_async(
                "SELECT count(*) AS n FROM procrastinate_events WHERE type = 'deferred_for_retry'"
            )
            return int(rows[0]["n"])

    try:
        requeued = asyncio.run(drive())
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=20)
    assert requeued == 2
    app = CoderApp(config)
    try:
        assert audit_sessions(app) == []
        rows = rebuild(all_events(app))
        assert {r.status for r in rows.values()} == {"complete"}
        assert {r.user_messages for r in rows.values()} == {1}
    finally:
        app.close()
    for ws in spaces:
        assert (ws / "t").read_text() == "x\n"  # the tool ran once, before the kill


def _bench() -> object:
    spec = importlib.util.spec_from_file_location("bench_fleet", REPO / "bench" / "fleet.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_fleet"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_small_kill_storm_loses_and_repeats_nothing() -> None:
    bench = _bench()
    plan = bench.Plan(  # type: ignore[attr-defined]
        workers=3,
        sessions=24,
        concurrency=2,
        steps=2,
        delay_ms=150,
        kills=6,
        kill_interval_s=0.5,
        projection=True,
    )
    result = bench.run_plan(plan)  # type: ignore[attr-defined]
    assert result.problems == []
    assert result.completed == 24
    assert result.kills == 6 and result.projection_kills == 1
