"""Issue 34, point 3, on PostgreSQL: a worker whose turn reaches a deferred question parks the
session and takes other work; ``coder-es approve`` from another process records the answer and
queues the session again; the worker that takes it is killed (-9) in the middle of the turn, and
another worker finishes the same turn. Nothing of the answer is lost, nothing runs twice."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from uuid import UUID

import pytest

pytest.importorskip("procrastinate", reason="the fleet queue needs procrastinate (postgres extra)")

from backends import PG, REPO, make_config, requires_postgres
from fleet_helpers import create_sessions, enqueue, run, workspace

from coder_es.application import CoderApp
from coder_es.fleet.answers import Queued, queue_answered, requeue_answered, sweep_answered
from coder_es.fleet.jobs import SessionJob
from coder_es.fleet.queue import FleetQueue, QueueCounts
from coder_es.fleet.worker import FleetWorker, WorkerOptions
from coder_es.service.waiting import answer, pending
from coder_es.store.config import StoreConfig

pytestmark = requires_postgres


def _env(schema: str) -> dict[str, str]:
    return {
        **os.environ,
        **PG,
        "POSTGRES_SCHEMA": schema,
        "CODER_ES_BACKEND": "postgres",
        "PYTHONPATH": str(REPO),
    }


def _worker(root: Path, schema: str) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "coder_es.cli.main", "--workspace", str(root), "worker"]
    args += ["--concurrency", "2", "--heartbeat", "0.3", "--stall-timeout", "5"]
    return subprocess.Popen(
        args, env=_env(schema), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


def test_a_parked_session_answered_elsewhere_is_finished_by_another_worker(
    tmp_path: Path, pg_schema: str
) -> None:
    config = make_config("postgres", tmp_path, pg_schema)
    turns = [
        {"blocks": [{"type": "tool_use", "name": "bash", "input": {"command": "echo x >> t"}}]},
        # Slow, so the kill (sent once the approved tool has run) lands inside the turn.
        {"blocks": [{"type": "text", "text": "done"}], "delay_ms": 5000},
    ]
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"turns": turns}))
    parked_ws, other_ws = workspace(tmp_path, "parked"), workspace(tmp_path, "other")
    jobs = asyncio.run(create_sessions(config, [parked_ws, other_ws], script))
    # The first session's bash call waits for an answer (a defer rule); the other just runs.
    jobs[0] = replace(jobs[0], yes=False, rules=(("defer", "bash"),))
    sid = jobs[0].session_id
    first = _worker(tmp_path, pg_schema)
    second: subprocess.Popen[bytes] | None = None

    async def drive() -> None:
        nonlocal second
        async with FleetQueue(config) as queue:
            await queue.enqueue_many(jobs)
            deadline = time.monotonic() + 90
            # Both jobs end: the parked one does not hold the worker (or the session lock).
            while (counts := await queue.counts()).succeeded < 2:
                assert time.monotonic() < deadline, f"the jobs never ended: {counts}"
                await asyncio.sleep(0.1)
            assert not (parked_ws / "t").exists() and (other_ws / "t").exists()
            app = CoderApp(config)
            try:
                (question,) = pending(app)
            finally:
                app.close()
            assert question.session == sid and question.tool == "bash"

            # The answer, from another process: recorded, and the session queued again.
            approved = subprocess.run(
                [sys.executable, "-m", "coder_es.cli.main", "approve", sid],
                env=_env(pg_schema),
                capture_output=True,
                text=True,
                timeout=120,
                cwd=tmp_path,
            )
            assert approved.returncode == 0, approved.stderr
            # Queued by ``approve``, or (a worker's sweep ran between its two writes) by the
            # sweep: one job either way, as the count of succeeded jobs below checks.
            assert "a worker continues the turn" in approved.stdout

            # The worker takes it, runs the approved call, and dies inside the closing turn.
            while not (parked_ws / "t").exists():
                assert time.monotonic() < deadline, "the approved call never ran"
                await asyncio.sleep(0.02)
            first.send_signal(signal.SIGKILL)
            first.wait()
            second = _worker(tmp_path, pg_schema)
            while (counts := await queue.counts()).open:
                assert time.monotonic() < deadline, f"not finished: {counts}"
                await asyncio.sleep(0.1)
            assert counts.succeeded == 3 and counts.failed == 0
            rows = await queue.connector.execute_query_all_async(
                "SELECT count(*) AS n FROM procrastinate_events WHERE type = 'deferred_for_retry'"
            )
            assert int(rows[0]["n"]) == 1  # the killed worker's job, taken over

    try:
        asyncio.run(drive())
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=20)
    assert (parked_ws / "t").read_text() == "x\n"  # the approved call ran once
    app = CoderApp(config)
    try:
        names = [type(e).__name__ for e in app.session_events(UUID(sid))]
        assert pending(app) == []
    finally:
        app.close()
    assert names.count("UserMessageAdded") == 1  # the same turn, continued
    assert names.count("DeferredAnswered") == 1 and names.count("TurnParked") == 1
    assert names.count("TurnResumed") == 1
    assert names.count("ModelResponded") == 2  # the tool call, then the closing text
    assert names[-1] == "ModelResponded"


def _deferred_job(
    tmp_path: Path, pg_schema: str
) -> tuple[StoreConfig, Path, SessionJob, WorkerOptions]:
    """One queued session whose bash call waits for an answer (a defer rule), and the options of
    a worker that runs until the queue is empty."""
    config = make_config("postgres", tmp_path, pg_schema)
    turns = [
        {"blocks": [{"type": "tool_use", "name": "bash", "input": {"command": "echo x >> t"}}]},
        {"blocks": [{"type": "text", "text": "done"}]},
    ]
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"turns": turns}))
    ws = workspace(tmp_path, "w")
    (job,) = run(create_sessions(config, [ws], script))
    job = replace(job, yes=False, rules=(("defer", "bash"),))
    run(enqueue(config, [job]))
    options = WorkerOptions(install_signal_handlers=False, until_empty=True)
    return config, ws, job, options


def test_an_answer_whose_requeue_was_lost_is_queued_by_the_next_worker(
    tmp_path: Path, pg_schema: str
) -> None:
    """``approve`` records the answer, then queues the session: killed between the two, the
    session would stay answered and unqueued. The recording alone (the crash) is followed by a
    worker starting: its sweep queues the session, and it finishes the same turn."""
    config, ws, job, options = _deferred_job(tmp_path, pg_schema)
    worker = FleetWorker(config, options)
    try:
        run(worker.run())
        assert [r.outcome for r in worker.reports] == ["waiting"]
        # The recording part of ``approve`` alone: no job is queued for the session.
        (done,) = answer(worker.app, job.session_id, [], decision="allow", by={"client": "t"})
        assert done.tool == "bash" and not (ws / "t").exists()
    finally:
        worker.close()

    again = FleetWorker(config, options)
    try:
        run(again.run())
        assert [r.outcome for r in again.reports] == ["end_turn"]
        names = [type(e).__name__ for e in again.app.session_events(UUID(job.session_id))]
        # Swept once: a second sweep finds the turn taken up, queues nothing.
        assert run(sweep(again)) == {}
    finally:
        again.close()
    assert (ws / "t").read_text() == "x\n"
    assert names.count("UserMessageAdded") == 1 and names.count("TurnResumed") == 1
    assert names[-1] == "ModelResponded"


def test_an_answer_is_queued_once_however_many_queue_it_at_once(
    tmp_path: Path, pg_schema: str
) -> None:
    """``approve`` queues the session after recording the answer; a worker's sweep running
    between the two writes finds the answer unqueued and queues it too. Both, and any number of
    them at once, end with one job for the answer; once a worker takes that job up, nobody
    queues another."""
    config, ws, job, options = _deferred_job(tmp_path, pg_schema)
    worker = FleetWorker(config, options)
    try:
        run(worker.run())
        assert [r.outcome for r in worker.reports] == ["waiting"]
        answer(worker.app, job.session_id, [], decision="allow", by={"client": "t"})

        async def race() -> list[Queued | None]:
            queues = [FleetQueue(config) for _ in range(4)]
            for q in queues:
                await q.open()
            try:
                return await asyncio.gather(
                    *(queue_answered(worker.app, q, job.session_id) for q in queues)
                )
            finally:
                for q in queues:
                    await q.close()

        done = [d for d in run(race()) if d is not None]
        assert len(done) == 4 and sum(d.new for d in done) == 1
        (job_id,) = {d.job_id for d in done}
        # The sweep and ``approve`` coming later find the job queued.
        assert run(sweep(worker)) == {}
        again = run(requeue_answered(worker.app, job.session_id))
        assert again == Queued(job_id, new=False)
    finally:
        worker.close()

    finisher = FleetWorker(config, options)
    try:
        run(finisher.run())
        assert [r.outcome for r in finisher.reports] == ["end_turn"]  # one job, not two
        # Taken up: asking again queues nothing.
        later = run(requeue_answered(finisher.app, job.session_id))
        assert later is not None and not later.new
        assert run(sweep(finisher)) == {}
        counts = run(counts_of(config))
        assert counts.open == 0 and counts.succeeded == 2
    finally:
        finisher.close()
    assert (ws / "t").read_text() == "x\n"


async def counts_of(config: StoreConfig) -> QueueCounts:
    async with FleetQueue(config) as queue:
        return await queue.counts()


async def sweep(worker: FleetWorker) -> dict[str, int]:
    async with FleetQueue(worker.config) as queue:
        return await sweep_answered(worker.app, queue)


def test_a_prompt_queued_for_a_parked_session_is_refused_and_the_parked_turn_kept(
    tmp_path: Path, pg_schema: str
) -> None:
    """Rule 6: a job with a new prompt would close the parked call unrun and drop the question.
    ``enqueue`` refuses it in one line; a job already queued (before the turn parked) fails in
    the queue with that line (its prompt kept there), and the question still waits."""
    config, ws, job, options = _deferred_job(tmp_path, pg_schema)
    worker = FleetWorker(config, options)
    try:
        run(worker.run())
        assert [r.outcome for r in worker.reports] == ["waiting"]
        before = len(worker.app.session_events(UUID(job.session_id)))
    finally:
        worker.close()

    enqueue_prompt = ["enqueue", "--session", job.session_id, "something else"]
    refused = subprocess.run(
        [sys.executable, "-m", "coder_es.cli.main", *enqueue_prompt],
        env=_env(pg_schema),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert refused.returncode == 2, refused.stderr
    assert "waits for answers" in refused.stderr and "coder-es approve" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr

    # Queued before the turn parked (or by another way in): the worker refuses it.
    run(enqueue(config, [replace(job, prompt="something else")]))
    again = FleetWorker(config, options)
    try:
        run(again.run())
        assert again.reports == []
        (failure,) = again.failures
        assert "waits for answers" in failure
        events = again.app.session_events(UUID(job.session_id))
        assert len(events) == before  # nothing recorded
        (question,) = pending(again.app)
        assert question.session == job.session_id and question.tool == "bash"
    finally:
        again.close()
    assert not (ws / "t").exists()
