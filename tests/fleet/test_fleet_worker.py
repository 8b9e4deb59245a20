"""Workers on the real PostgreSQL queue: sessions complete, retries and conflicts lose nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from uuid import UUID

import pytest

pytest.importorskip("procrastinate", reason="the fleet queue needs procrastinate (postgres extra)")

from backends import make_config, requires_postgres
from fleet_helpers import create_sessions, enqueue, run, workspace, write_script

from coder_es.fleet.audit import audit_sessions
from coder_es.fleet.queue import FleetQueue
from coder_es.fleet.worker import FleetWorker, WorkerOptions
from coder_es.records import event_kind
from coder_es.store.config import StoreConfig

pytestmark = requires_postgres


def _config(tmp_path: Path, pg_schema: str) -> StoreConfig:
    return make_config("postgres", tmp_path, pg_schema)


def _options(**kw: object) -> WorkerOptions:
    return WorkerOptions(install_signal_handlers=False, **kw)  # type: ignore[arg-type]


def _kinds(worker: FleetWorker, sid: str) -> list[str]:
    return [event_kind(e) for e in worker.app.session_events(UUID(sid))]


def test_a_worker_runs_queued_sessions_to_completion(tmp_path: Path, pg_schema: str) -> None:
    config = _config(tmp_path, pg_schema)
    script = write_script(tmp_path / "s.json", 2, delay_ms=20)
    spaces = [workspace(tmp_path, f"w{i}") for i in range(3)]
    jobs = run(create_sessions(config, spaces, script))
    run(enqueue(config, jobs))
    worker = FleetWorker(config, _options(concurrency=2, until_empty=True))
    try:
        run(worker.run())
        assert sorted(r.outcome for r in worker.reports) == ["end_turn"] * 3
        assert all(r.sent for r in worker.reports)
        assert audit_sessions(worker.app) == []
        for ws in spaces:
            assert (ws / "trail.txt").read_text() == "step-0\nstep-1\n"

        async def counts() -> tuple[int, int]:
            async with FleetQueue(config) as queue:
                c = await queue.counts()
                return c.succeeded, c.open

        assert run(counts()) == (3, 0)
    finally:
        worker.close()


def test_a_retried_job_resumes_instead_of_sending_its_prompt_again(
    tmp_path: Path, pg_schema: str
) -> None:
    config = _config(tmp_path, pg_schema)
    script = write_script(tmp_path / "s.json", 1)
    [job] = run(create_sessions(config, [workspace(tmp_path, "w")], script))
    worker = FleetWorker(config, _options())
    try:

        async def twice() -> list[object]:
            await worker.queue.open()
            try:
                # The same job id twice: what a worker taking over a crashed worker's job sees.
                return [await worker.advance(job, 41, None), await worker.advance(job, 41, None)]
            finally:
                await worker.queue.close()

        first, second = run(twice())
        assert (first.sent, second.sent) == (True, False)  # type: ignore[attr-defined]
        kinds = _kinds(worker, job.session_id)
        assert kinds.count("UserMessageAdded") == 1
        assert kinds.count("ModelResponded") == 2
        assert audit_sessions(worker.app) == []
    finally:
        worker.close()


def test_two_workers_on_one_session_conflict_without_losing_or_repeating_anything(
    tmp_path: Path, pg_schema: str
) -> None:
    """The queue lock is bypassed on purpose: the session's lease makes one worker wait for the
    other (issue 18.1), and optimistic concurrency stays the last defence behind it."""
    config = _config(tmp_path, pg_schema)
    script = write_script(tmp_path / "s.json", 3, delay_ms=30)
    ws = workspace(tmp_path, "w")
    [job] = run(create_sessions(config, [ws], script))
    a = FleetWorker(config, _options())
    b = FleetWorker(config, _options())
    try:

        async def race() -> list[object]:
            await a.queue.open()
            await b.queue.open()
            try:
                return list(await asyncio.gather(a.advance(job, 7, None), b.advance(job, 7, None)))
            finally:
                await a.queue.close()
                await b.queue.close()

        reports = run(race())
        assert [r.sent for r in reports].count(True) == 1  # type: ignore[attr-defined]
        kinds = _kinds(a, job.session_id)
        assert kinds.count("UserMessageAdded") == 1
        assert kinds[-1] == "ModelResponded"
        assert audit_sessions(a.app) == []
        lines = (ws / "trail.txt").read_text().split()
        assert len(lines) == len(set(lines))  # no tool ran twice
    finally:
        a.close()
        b.close()
