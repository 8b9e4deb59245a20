"""Issue 34, point 4, on the fleet: a worker whose turn reaches a scheduled call parks the
session and queues it again for the window's opening (procrastinate's ``scheduled_at``); when
that time comes (the loop's injected clock, and the queue's time), a worker runs the call and
finishes the same turn."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import UUID

import pytest

pytest.importorskip("procrastinate", reason="the fleet queue needs procrastinate (postgres extra)")

from backends import make_config, requires_postgres
from fleet_helpers import create_sessions, enqueue, run, workspace

from coder_es.fleet.queue import FleetQueue
from coder_es.fleet.worker import FleetWorker, WorkerOptions
from coder_es.records import event_kind
from coder_es.store.config import StoreConfig

pytestmark = requires_postgres

# A date the queue's own clock has not reached: nothing runs the scheduled job by itself.
NOON = datetime(2031, 3, 1, 12, 0, tzinfo=UTC)
OPENS = datetime(2031, 3, 1, 22, 0, tzinfo=UTC)


async def db_now(config: StoreConfig) -> datetime:
    async with FleetQueue(config) as queue:
        row = await queue.connector.execute_query_one_async("SELECT now() AS now")
    return row["now"]


class SetClock:
    def __init__(self, now: datetime) -> None:
        self.at = now

    def monotonic(self) -> float:
        return 0.0

    def now(self) -> datetime:
        return self.at

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(0)


def test_a_worker_queues_a_scheduled_call_for_its_window_and_runs_it_then(
    tmp_path: Path, pg_schema: str
) -> None:
    config = make_config("postgres", tmp_path, pg_schema)
    turns = [
        {"blocks": [{"type": "tool_use", "name": "bash", "input": {"command": "echo night"}}]},
        {"blocks": [{"type": "text", "text": "done"}]},
    ]
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"turns": turns}))
    (job,) = run(create_sessions(config, [workspace(tmp_path, "w")], script))
    job = replace(job, rules=(("schedule", "bash:echo night*@22:00-06:00"),))
    run(enqueue(config, [job]))
    clock = SetClock(NOON)
    options = WorkerOptions(install_signal_handlers=False, until_empty=True)
    worker = FleetWorker(config, options, clock=clock)
    try:
        start = run(db_now(config))
        run(worker.run())
        end = run(db_now(config))
        assert [r.outcome for r in worker.reports] == ["waiting"]

        async def scheduled() -> list[tuple[int, datetime | None, str]]:
            async with FleetQueue(config) as queue:
                rows = await queue.connector.execute_query_all_async(
                    "SELECT id, scheduled_at, status::text AS status FROM procrastinate_jobs "
                    "ORDER BY id"
                )
            return [(r["id"], r["scheduled_at"], r["status"]) for r in rows]

        first, again = run(scheduled())
        assert first[2] == "succeeded" and again[2] == "todo"
        # Queued for the window's opening: in as long as the loop's clock has to wait for it,
        # measured on the queue's (the database's) clock.
        assert start + (OPENS - NOON) <= again[1] <= end + (OPENS - NOON)

        # The window opens: the loop's clock, and the queue's time (the job becomes due).
        clock.at = OPENS

        async def due_now() -> None:
            async with FleetQueue(config) as queue:
                await queue.connector.execute_query_async(
                    "UPDATE procrastinate_jobs SET scheduled_at = now() WHERE id = %(id)s",
                    id=again[0],
                )

        run(due_now())
        run(worker.run())
        assert [r.outcome for r in worker.reports] == ["waiting", "end_turn"]
        kinds = [event_kind(e) for e in worker.app.session_events(UUID(job.session_id))]
        done = list(worker.app.session_events(UUID(job.session_id)))
    finally:
        worker.close()
    assert kinds.count("UserMessageAdded") == 1 and kinds.count("TurnResumed") == 1
    (ran,) = [e for e in done if event_kind(e) == "ToolCallCompleted"]
    assert ran.output.strip().startswith("night")
    (scheduled_call,) = [e for e in done if event_kind(e) == "CallScheduled"]
    assert scheduled_call.due == OPENS.isoformat()


def test_a_worker_whose_clock_runs_behind_the_database_does_not_take_the_job_again_and_again(
    tmp_path: Path, pg_schema: str
) -> None:
    """The loop's clock says 12:00 of a day the database's clock left behind long ago: the
    window's opening (22:00 that day) is past for the queue, not for the loop. The job is
    queued again for ten hours from now on the database's clock, not for a time the queue
    finds past (which would hand it straight back to a worker that parks it again, and again,
    for as long as the skew lasts)."""
    config = make_config("postgres", tmp_path, pg_schema)
    turns = [
        {"blocks": [{"type": "tool_use", "name": "bash", "input": {"command": "echo night"}}]},
        {"blocks": [{"type": "text", "text": "done"}]},
    ]
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"turns": turns}))
    (job,) = run(create_sessions(config, [workspace(tmp_path, "w")], script))
    job = replace(job, rules=(("schedule", "bash:echo night*@22:00-06:00"),))
    run(enqueue(config, [job]))
    behind = SetClock(datetime(2020, 3, 1, 12, 0, tzinfo=UTC))
    # A worker that keeps waiting for work (polling fast): one parked job must be all it takes.
    options = WorkerOptions(install_signal_handlers=False, poll_s=0.05)
    worker = FleetWorker(config, options, clock=behind)

    async def bounded() -> None:
        task = asyncio.ensure_future(worker.run())
        deadline = asyncio.get_running_loop().time() + 90
        while not worker.reports and not task.done():
            assert asyncio.get_running_loop().time() < deadline, "the job never ran"
            await asyncio.sleep(0.05)
        await asyncio.sleep(3)  # time enough to be handed the job back, again and again
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    try:
        start = run(db_now(config))
        run(bounded())
        end = run(db_now(config))
        assert [r.outcome for r in worker.reports] == ["waiting"]

        async def todo() -> list[datetime]:
            async with FleetQueue(config) as queue:
                rows = await queue.connector.execute_query_all_async(
                    "SELECT scheduled_at FROM procrastinate_jobs WHERE status = 'todo'"
                )
            return [r["scheduled_at"] for r in rows]

        (at,) = run(todo())
        assert start + timedelta(hours=10) <= at <= end + timedelta(hours=10)
    finally:
        worker.close()
