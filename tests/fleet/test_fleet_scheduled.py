"""Issue 34, point 4, on the fleet: a worker whose turn reaches a scheduled call parks the
session and queues it again for the window's opening (procrastinate's ``scheduled_at``); when
that time comes (the loop's injected clock, and the queue's time), a worker runs the call and
finishes the same turn."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from uuid import UUID

import pytest

pytest.importorskip("procrastinate", reason="the fleet queue needs procrastinate (postgres extra)")

from backends import make_config, requires_postgres
from fleet_helpers import create_sessions, enqueue, run, workspace

from coder_es.fleet.queue import FleetQueue
from coder_es.fleet.worker import FleetWorker, WorkerOptions
from coder_es.records import event_kind

pytestmark = requires_postgres

# A date the queue's own clock has not reached: nothing runs the scheduled job by itself.
NOON = datetime(2031, 3, 1, 12, 0, tzinfo=UTC)
OPENS = datetime(2031, 3, 1, 22, 0, tzinfo=UTC)


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
        run(worker.run())
        assert [r.outcome for r in worker.reports] == ["waiting"]

        async def scheduled() -> list[tuple[int, datetime | None, str]]:
            async with FleetQueue(config) as queue:
                rows = await queue.connector.execute_query_all_async(
                    "SELECT id, scheduled_at, status::text AS status FROM procrastinate_jobs "
                    "ORDER BY id"
                )
            return [(r["id"], r["scheduled_at"], r["status"]) for r in rows]

        first, again = run(scheduled())
        assert first[2] == "succeeded"
        assert again[1] == OPENS and again[2] == "todo"  # queued for the window's opening

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
