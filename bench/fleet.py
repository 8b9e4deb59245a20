"""Scale-out on PostgreSQL: N worker processes x M sessions, with kill -9 of random workers.

Each session runs the scripted provider (``delay_ms`` per model turn simulates model latency) and
real tools (bash appends a line to ``trail.txt`` in the session's own scratch workspace). Workers
are separate ``coder-es worker`` processes; a ``coder-es project`` process keeps the sessions
summary view. Each run uses a fresh PostgreSQL schema, dropped afterwards.

    python3 bench/fleet.py                       scaling (1 vs 8 workers) then the kill run
    python3 bench/fleet.py --workers 4 --kills 5 --repeat 1

Printed: for 1 worker (the baseline, same process) and for N workers, the median over
``--repeat`` runs of sessions/s and events/s, and their ratio (target: >= 6x with 8 workers);
then the kill run: kills done, sessions completed, and the checks: every session complete,
no event lost or duplicated (hash chains, one result per tool call, no step answered twice, every
successful tool side effect exactly once on disk), and the projection equal to a rebuild from
zero (its own process was killed -9 and restarted during the run too).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import psycopg  # noqa: E402

from coder_es.application import CoderApp  # noqa: E402
from coder_es.fleet.audit import audit_sessions  # noqa: E402
from coder_es.fleet.jobs import SessionJob  # noqa: E402
from coder_es.fleet.projection import compare_with_rebuild, open_summary_view  # noqa: E402
from coder_es.fleet.queue import FleetQueue  # noqa: E402
from coder_es.fleet.script import fleet_provider_factory  # noqa: E402
from coder_es.fleet.summary import all_events, rebuild  # noqa: E402
from coder_es.records import event_kind  # noqa: E402
from coder_es.service.api import AgentService, SessionOptions  # noqa: E402
from coder_es.store.config import StoreConfig  # noqa: E402

PG = {
    "POSTGRES_DBNAME": os.environ.get("CODER_ES_TEST_PG_DB", "test"),
    "POSTGRES_HOST": os.environ.get("CODER_ES_TEST_PG_HOST", "127.0.0.1"),
    "POSTGRES_PORT": os.environ.get("CODER_ES_TEST_PG_PORT", "5432"),
    "POSTGRES_USER": os.environ.get("CODER_ES_TEST_PG_USER", "postgres"),
}


@dataclass(frozen=True)
class Plan:
    workers: int
    sessions: int
    concurrency: int = 2
    steps: int = 2
    delay_ms: int = 200
    kills: int = 0
    kill_interval_s: float = 0.4
    heartbeat_s: float = 0.5
    stall_timeout_s: float = 3.0
    projection: bool = False
    timeout_s: float = 600.0


@dataclass
class Result:
    plan: Plan
    elapsed_s: float
    events: int
    completed: int
    kills: int = 0
    projection_kills: int = 0
    requeued: int = 0
    """Jobs put back on the queue because their worker was killed."""
    problems: list[str] = field(default_factory=list)

    @property
    def sessions_per_s(self) -> float:
        return self.completed / self.elapsed_s

    @property
    def events_per_s(self) -> float:
        return self.events / self.elapsed_s


def write_script(path: Path, steps: int, delay_ms: int) -> Path:
    turns: list[dict[str, Any]] = [
        {
            "blocks": [
                {"type": "text", "text": f"step {i}"},
                {
                    "type": "tool_use",
                    "name": "bash",
                    "input": {"command": f"echo step-{i} >> trail.txt"},
                },
            ],
            "delay_ms": delay_ms,
        }
        for i in range(steps)
    ]
    turns.append({"blocks": [{"type": "text", "text": "done"}], "delay_ms": delay_ms})
    path.write_text(json.dumps({"turns": turns}))
    return path


class Fleet:
    """A fresh schema, the worker and projection processes, and the checks at the end."""

    def __init__(self, plan: Plan, root: Path) -> None:
        self.plan = plan
        self.root = root
        self.schema = f"bench_{uuid.uuid4().hex[:10]}"
        self.env = {
            **os.environ,
            **PG,
            "POSTGRES_SCHEMA": self.schema,
            "CODER_ES_BACKEND": "postgres",
            "PYTHONPATH": str(REPO),
        }
        self.config = StoreConfig(
            backend="postgres", path=root / "store", extra={**PG, "POSTGRES_SCHEMA": self.schema}
        )
        self.workers: list[subprocess.Popen[bytes]] = []
        self.projector: subprocess.Popen[bytes] | None = None
        # Outside the scratch directory, so they survive a failed run.
        self.logs = Path(tempfile.gettempdir()) / "coder-es-fleet-logs" / self.schema
        self.logs.mkdir(parents=True, exist_ok=True)
        self._spawned = 0

    def _conn(self) -> psycopg.Connection[Any]:
        return psycopg.connect(
            dbname=PG["POSTGRES_DBNAME"],
            host=PG["POSTGRES_HOST"],
            port=PG["POSTGRES_PORT"],
            user=PG["POSTGRES_USER"],
            autocommit=True,
        )

    def create_schema(self) -> None:
        with self._conn() as c:
            c.execute(f"CREATE SCHEMA {self.schema}")

    def drop_schema(self) -> None:
        with self._conn() as c:
            c.execute(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")

    def _cli(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "coder_es.cli.main", "--workspace", str(self.root), *args]

    def _spawn(self, args: list[str], name: str) -> subprocess.Popen[bytes]:
        self._spawned += 1
        log = open(self.logs / f"{name}-{self._spawned}.log", "wb")  # noqa: SIM115
        return subprocess.Popen(args, env=self.env, stdout=log, stderr=log, cwd=self.root)

    def start_worker(self) -> None:
        p = self.plan
        args = self._cli(
            "worker",
            "--concurrency",
            str(p.concurrency),
            "--heartbeat",
            str(p.heartbeat_s),
            "--stall-timeout",
            str(p.stall_timeout_s),
        )
        self.workers.append(self._spawn(args, "worker"))

    def start_projector(self) -> None:
        self.projector = self._spawn(self._cli("project"), "project")

    def stop_all(self) -> None:
        procs = [*self.workers, *([self.projector] if self.projector else [])]
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    async def prepare(self) -> list[SessionJob]:
        """Workspaces, a script and the sessions (created before the clock starts)."""
        p = self.plan
        script = write_script(self.root / "script.json", p.steps, p.delay_ms)
        app = CoderApp(self.config, env={"POSTGRES_POOL_SIZE": "1"})
        jobs: list[SessionJob] = []
        try:
            for i in range(p.sessions):
                ws = self.root / "ws" / f"s{i:04d}"
                ws.mkdir(parents=True)
                (ws / "README.md").write_text(f"# workspace {i}\n")
                service = AgentService(app, ws, provider_factory=fleet_provider_factory())
                handle = await service.create_session(
                    SessionOptions(provider="scripted", model=str(script), title=f"s{i:04d}")
                )
                await handle.close()
                jobs.append(
                    SessionJob(
                        session_id=handle.id,
                        prompt=f"run the steps ({i})",
                        yes=True,
                        provider="scripted",
                        model=str(script),
                    )
                )
        finally:
            app.close()
        return jobs

    async def run(self) -> Result:
        p = self.plan
        jobs = await self.prepare()
        async with FleetQueue(self.config) as queue:  # also creates the queue's schema
            if p.projection:
                self.start_projector()
            for _ in range(p.workers):
                self.start_worker()
            deadline = time.monotonic() + 120
            while await queue.live_workers() < p.workers:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"workers did not start; see {self.logs}")
                await asyncio.sleep(0.1)
            with self._conn() as c:
                before = c.execute(
                    f"SELECT coalesce(max(notification_id), 0) FROM {self.schema}.coder_es_events"
                ).fetchone()
            events_before = int(before[0]) if before else 0
            started = time.monotonic()
            await queue.enqueue_many(jobs)
            kills, projection_kills = await self._wait(queue, started)
            elapsed = time.monotonic() - started
            counts = await queue.counts()
        with self._conn() as c:
            row = c.execute(f"SELECT count(*) FROM {self.schema}.coder_es_events").fetchone()
            again = c.execute(
                f"SELECT count(*) FROM {self.schema}.procrastinate_events "
                "WHERE type = 'deferred_for_retry'"
            ).fetchone()
        events = (int(row[0]) if row else 0) - events_before
        result = Result(p, elapsed, events, counts.succeeded, kills, projection_kills)
        result.requeued = int(again[0]) if again else 0
        if counts.failed:
            result.problems.append(f"{counts.failed} job(s) failed; see {self.logs}")
        return result

    async def _wait(self, queue: FleetQueue, started: float) -> tuple[int, int]:
        p = self.plan
        rng = random.Random(7)
        kills = projection_kills = 0
        next_kill = started + p.kill_interval_s
        while True:
            counts = await queue.counts()
            if counts.open == 0:
                return kills, projection_kills
            now = time.monotonic()
            if now - started > p.timeout_s:
                raise RuntimeError(f"the run did not finish in {p.timeout_s}s: {counts}")
            if kills < p.kills and now >= next_kill:
                alive = [w for w in self.workers if w.poll() is None]
                victim = rng.choice(alive)
                victim.send_signal(signal.SIGKILL)
                victim.wait()
                kills += 1
                self.start_worker()
                if self.projector is not None and kills == max(1, p.kills // 2):
                    self.projector.send_signal(signal.SIGKILL)
                    self.projector.wait()
                    projection_kills += 1
                    self.start_projector()
                next_kill = now + p.kill_interval_s
            await asyncio.sleep(0.05)

    # ------------------------------------------------------------------ checks

    def check(self, result: Result) -> None:
        app = CoderApp(self.config, env={"POSTGRES_POOL_SIZE": "1"})
        try:
            result.problems.extend(self._check_sessions(app))
            if self.projector is not None:
                result.problems.extend(self._check_projection(app))
        finally:
            app.close()

    def _check_sessions(self, app: CoderApp) -> list[str]:
        problems = audit_sessions(app)
        rows = rebuild(all_events(app))
        if len(rows) != self.plan.sessions:
            problems.append(f"{len(rows)} sessions in the store, {self.plan.sessions} expected")
        for sid, row in rows.items():
            if row.status != "complete":
                problems.append(f"session {sid} ended {row.status}, not complete")
            if row.user_messages != 1:
                problems.append(f"session {sid} has {row.user_messages} user messages, not 1")
            events = app.session_events(uuid.UUID(sid))
            ok_steps = Counter(
                e.tool_use_id.split("_")[1]
                for e in events
                if event_kind(e) == "ToolCallCompleted" and not e.is_error
            )
            trail = Path(row.workspace) / "trail.txt"
            lines = Counter(trail.read_text().split()) if trail.exists() else Counter()
            for line, n in lines.items():
                if n > 1:
                    problems.append(f"session {sid}: {line} ran {n} times (a tool ran twice)")
            for step in ok_steps:
                line = step.replace("step", "step-")
                if lines[line] != 1:
                    problems.append(f"session {sid}: {line} recorded but ran {lines[line]} times")
        return problems

    def _check_projection(self, app: CoderApp) -> list[str]:
        view = open_summary_view(self.config)
        latest = app.recorder.max_notification_id() or 0
        deadline = time.monotonic() + 60
        while view.position() < latest:
            if time.monotonic() > deadline:
                return [f"the projection stopped at {view.position()} of {latest}"]
            time.sleep(0.1)
        return compare_with_rebuild(app, view)


def run_plan(plan: Plan, *, check: bool = True, keep: bool = False) -> Result:
    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp:
        fleet = Fleet(plan, Path(tmp))
        fleet.create_schema()
        try:
            try:
                result = asyncio.run(fleet.run())
                if check:
                    fleet.check(result)
            finally:
                fleet.stop_all()
        finally:
            if not keep:
                fleet.drop_schema()
    return result


def _median(results: list[Result], attr: str) -> float:
    return statistics.median(getattr(r, attr) for r in results)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--sessions", type=int, default=64, help="sessions in an N-worker run")
    ap.add_argument("--baseline-sessions", type=int, default=16, help="sessions, 1-worker run")
    ap.add_argument("--concurrency", type=int, default=2, help="sessions per worker at once")
    ap.add_argument("--steps", type=int, default=2, help="tool steps per session")
    ap.add_argument("--delay-ms", type=int, default=200, help="model latency per turn")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--kill-sessions", type=int, default=160)
    ap.add_argument("--skip-scaling", action="store_true")
    ap.add_argument("--skip-kill", action="store_true")
    args = ap.parse_args(argv)
    common = {"concurrency": args.concurrency, "steps": args.steps, "delay_ms": args.delay_ms}
    failed = False
    print(
        f"fleet bench: {args.steps} tool steps + 1 closing turn per session, "
        f"{args.delay_ms} ms model latency per turn, {args.concurrency} session(s) per worker"
    )
    if not args.skip_scaling:
        one: list[Result] = []
        many: list[Result] = []
        for _ in range(args.repeat):
            one.append(run_plan(Plan(1, args.baseline_sessions, **common)))  # type: ignore[arg-type]
            many.append(run_plan(Plan(args.workers, args.sessions, **common)))  # type: ignore[arg-type]
        for label, results in (("1 worker (baseline)", one), (f"{args.workers} workers", many)):
            print(
                f"  {label:22s} sessions/s {_median(results, 'sessions_per_s'):7.2f}   "
                f"events/s {_median(results, 'events_per_s'):8.1f}   "
                f"(median of {len(results)}; {results[0].plan.sessions} sessions per run)"
            )
            runs = ", ".join(f"{r.sessions_per_s:.2f}" for r in results)
            print(f"  {'':22s} runs (sessions/s): {runs}")
        print(f"  load average at the end: {os.getloadavg()[0]:.1f} (other work skews the ratio)")
        ratio = _median(many, "sessions_per_s") / _median(one, "sessions_per_s")
        eratio = _median(many, "events_per_s") / _median(one, "events_per_s")
        print(f"  ratio {args.workers}/1: sessions/s {ratio:.2f}x, events/s {eratio:.2f}x")
        for r in one + many:
            for problem in r.problems:
                failed = True
                print(f"  PROBLEM {problem}")
    if not args.skip_kill:
        plan = Plan(
            args.workers,
            args.kill_sessions,
            kills=args.kills,
            projection=True,
            **common,  # type: ignore[arg-type]
        )
        r = run_plan(plan)
        print(
            f"  kill run: {r.plan.workers} workers, {r.plan.sessions} sessions, {r.kills} worker "
            f"kill -9 (+{r.projection_kills} of the projection process): {r.completed} jobs done "
            f"({r.requeued} taken over from killed workers) in {r.elapsed_s:.1f}s, "
            f"{r.sessions_per_s:.2f} sessions/s, {r.events} events"
        )
        if r.kills < plan.kills:
            print(f"  note: the run ended after {r.kills} of {plan.kills} kills")
        if r.problems:
            failed = True
            for problem in r.problems[:30]:
                print(f"  PROBLEM {problem}")
        else:
            print(
                "  checks: every session complete; no event lost or duplicated; every tool side "
                "effect once; the projection equals a rebuild from zero"
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
