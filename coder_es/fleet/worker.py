"""A fleet worker: takes session jobs from the queue and advances the sessions, several at once.

How a job runs (``FleetWorker.advance``):

1. Claim: the first attempt of a job records the session's version in ``coder_es_fleet_claims``.
   A later attempt of the same job (after a crash) reads the same base version back.
2. Send or resume: a job with a prompt sends it, unless an attempt of this job already recorded
   a user message after the base version (jobs of a session run one at a time, so no other job
   could have); then it resumes instead. A job without a prompt resumes. The agent loop continues
   from the session's events either way, so a crashed worker's session goes on where it stopped.
3. Conflicts: if the session was written by someone else meanwhile (optimistic concurrency in the
   session aggregate), the worker first checks that the job is still its own in the queue; if it
   is, it reloads the session and resumes (bounded); if the job was handed to another worker, it
   steps aside. A conflict is never fatal to the worker.

Crash recovery: every worker sends a heartbeat (procrastinate) and runs a reaper that, under an
advisory lock (so reapers never race), puts the running jobs of workers whose heartbeat is older
than ``stall_timeout_s`` back on the queue. Their session lock is released with them, and the next
worker to take the job resumes the session from its events. An answer recorded by a process that
died before it queued the session (``coder-es approve`` killed between its two writes) is found
by the sweep every worker runs when it starts and every ``sweep_interval_s``
(``fleet.answers.sweep_answered``): the session is queued again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

from eventsourcing.persistence import IntegrityError
from procrastinate import JobContext
from procrastinate import exceptions as pexc

from coder_es.agent import updates as up
from coder_es.agent.runner import Clock, SessionConflictError, SystemClock
from coder_es.application import CoderApp
from coder_es.config.values import TelemetryConfig
from coder_es.errors import SessionBusyError
from coder_es.fleet.answers import sweep_answered
from coder_es.fleet.errors import FleetError
from coder_es.fleet.jobs import SessionJob
from coder_es.fleet.queue import DEFAULT_QUEUE, TASK_NAME, FleetQueue
from coder_es.fleet.script import ProviderFactory, fleet_provider_factory
from coder_es.records import event_kind
from coder_es.service.api import AgentService, SessionOptions, auto_answerer
from coder_es.service.waiting import questions_in
from coder_es.store.config import StoreConfig
from coder_es.store.postgres_only import require_postgres
from coder_es.telemetry.attach import start_telemetry

log = logging.getLogger("coder_es.fleet")

# Names the reapers' critical section in pg_try_advisory_xact_lock (any fixed number).
_REAP_LOCK = 0x636F646572_7270

# Workers run one store operation at a time (one thread), so a small pool is enough; the
# server's connection limit is shared by the whole fleet.
WORKER_POOL_ENV = {"POSTGRES_POOL_SIZE": "1", "POSTGRES_MAX_OVERFLOW": "2"}


@dataclass(frozen=True)
class WorkerOptions:
    concurrency: int = 4
    """Sessions advanced at once by one worker (asyncio tasks)."""
    queue: str = DEFAULT_QUEUE
    name: str | None = None
    heartbeat_s: float = 2.0
    stall_timeout_s: float = 15.0
    """A worker silent for this long is taken for dead and its jobs are queued again."""
    reap_interval_s: float = 2.0
    poll_s: float = 1.0
    """Fallback polling of the queue (new jobs normally arrive by LISTEN/NOTIFY)."""
    until_empty: bool = False
    """Exit when there is no job left to start, instead of waiting for more."""
    sweep_interval_s: float = 10.0
    """How often a worker queues answered parked sessions that have no job (and at start)."""
    max_conflicts: int = 5
    busy_wait_s: float = 60.0
    """How long a job waits for a session whose lease another process holds (a worker taken
    for dead that is still finishing its turn, or a user's command) before it fails."""
    install_signal_handlers: bool = True

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise FleetError("a worker needs a concurrency of at least 1")
        if self.stall_timeout_s <= self.heartbeat_s:
            raise FleetError(
                f"the stall timeout ({self.stall_timeout_s}s) must be longer than the heartbeat "
                f"interval ({self.heartbeat_s}s), or live workers would be taken for dead"
            )


@dataclass(frozen=True)
class JobReport:
    session_id: str
    outcome: str
    """The turn's end (``end_turn``, ``error``, ``max_steps``...) or ``superseded``."""
    steps: int
    sent: bool
    """True when this run recorded the job's prompt (False: an earlier attempt had)."""
    conflicts: int


class FleetWorker:
    def __init__(
        self,
        config: StoreConfig,
        options: WorkerOptions | None = None,
        *,
        provider_factory: ProviderFactory | None = None,
        telemetry: TelemetryConfig | None = None,
        clock: Clock | None = None,
    ) -> None:
        require_postgres(config.backend, "a fleet worker")
        self.config = config
        self.options = options or WorkerOptions()
        self.provider_factory = provider_factory or fleet_provider_factory()
        self.clock = clock
        """The loops' clock (None: the system's): when scheduled calls may run."""
        self.queue = FleetQueue(config, queue=self.options.queue, max_size=4)
        env = {k: v for k, v in WORKER_POOL_ENV.items() if k not in config.extra}
        self.app = CoderApp(config, env=env)
        self.telemetry = start_telemetry(self.app, telemetry)
        self.reports: list[JobReport] = []
        self.failures: list[str] = []
        self._register_task()

    def _register_task(self) -> None:
        worker = self

        @self.queue.app.task(name=TASK_NAME, queue=self.options.queue, pass_context=True)
        async def advance_session(context: JobContext, **args: Any) -> None:
            assert context.job.id is not None
            try:
                job = SessionJob.from_args(args)
                report = await worker.advance(job, context.job.id, context.job.worker_id)
                if worker.telemetry is not None:
                    # The job's turn is over: send its span now, not when the worker stops.
                    worker.telemetry.finish_session(str(job.session_id))
            except Exception as e:
                # The job fails in the queue (kept with its error); the worker goes on.
                worker.failures.append(f"job {context.job.id}: {e}")
                log.error("job %s failed: %s", context.job.id, e)
                raise
            worker.reports.append(report)
            if report.outcome == "waiting":
                await worker.schedule_resume(job)
            log.info(
                "session %s: %s after %d step(s)%s%s",
                report.session_id,
                report.outcome,
                report.steps,
                "" if report.sent else " (resumed)",
                f", {report.conflicts} conflict(s)" if report.conflicts else "",
            )

    # ------------------------------------------------------------------ running

    async def run(self) -> None:
        """Work until stopped (SIGINT/SIGTERM: finish running jobs first) or the queue is empty
        with ``until_empty``."""
        o = self.options
        await self.queue.open()
        # Before taking work, so that ``until_empty`` sees what the sweep queues.
        await self._sweep_logged()
        reaper = asyncio.create_task(self._reap_forever())
        sweeper = asyncio.create_task(self._sweep_forever())
        try:
            await self.queue.app.run_worker_async(
                queues=[o.queue],
                name=o.name or "coder-es-worker",
                concurrency=o.concurrency,
                wait=not o.until_empty,
                fetch_job_polling_interval=o.poll_s,
                update_heartbeat_interval=o.heartbeat_s,
                stalled_worker_timeout=o.stall_timeout_s,
                install_signal_handlers=o.install_signal_handlers,
                delete_jobs="never",
            )
        finally:
            reaper.cancel()
            sweeper.cancel()
            await asyncio.gather(reaper, sweeper, return_exceptions=True)
            await self.queue.close()

    def close(self) -> None:
        if self.telemetry is not None:
            self.telemetry.close()
        self.app.close()

    async def _reap_forever(self) -> None:
        while True:
            try:
                retried = await self.reap_once()
                if retried:
                    log.warning("requeued job(s) %s of workers that stopped", retried)
            except asyncio.CancelledError:
                raise
            except Exception:  # a failed round is retried on the next tick
                log.exception("reaping stalled jobs failed")
            await asyncio.sleep(self.options.reap_interval_s)

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.options.sweep_interval_s)
            await self._sweep_logged()

    async def _sweep_logged(self) -> None:
        try:
            queued = await sweep_answered(self.app, self.queue)
        except asyncio.CancelledError:
            raise
        except Exception:  # a failed sweep is retried on the next tick
            log.exception("sweeping answered sessions failed")
            return
        for sid, job_id in queued.items():
            log.warning("session %s was answered but not queued: queued it (job %d)", sid, job_id)

    async def reap_once(self) -> list[int]:
        """Queue again the running jobs of workers whose heartbeat stopped."""
        manager = self.queue.app.job_manager
        retried: list[int] = []
        async with self.queue.connector.pool.connection() as conn, conn.transaction():
            cur = await conn.execute("SELECT pg_try_advisory_xact_lock(%s)", (_REAP_LOCK,))
            row = await cur.fetchone()
            if row is None or not row[0]:
                return retried  # another worker is reaping right now
            stalled = await manager.get_stalled_jobs(
                queue=self.options.queue,
                task_name=TASK_NAME,
                seconds_since_heartbeat=self.options.stall_timeout_s,
            )
            for job in stalled:
                with contextlib.suppress(pexc.ConnectorException):
                    await manager.retry_job(job)
                    assert job.id is not None
                    retried.append(job.id)
        return retried

    # ------------------------------------------------------------------ one job

    async def advance(self, job: SessionJob, job_id: int, worker_id: int | None) -> JobReport:
        conflicts = 0
        sent: list[bool] = []  # whether an attempt in this run recorded the prompt
        busy_until: float | None = None
        while True:
            try:
                report = await self._advance_once(job, job_id, conflicts, sent)
                return JobReport(
                    report.session_id, report.outcome, report.steps, any(sent), conflicts
                )
            except SessionBusyError as e:
                # One writer per session: wait for the holder (it releases when its turn ends
                # or it dies), unless the job was handed to another worker meanwhile.
                now = asyncio.get_running_loop().time()
                busy_until = busy_until or now + self.options.busy_wait_s
                if worker_id is not None and not await self._still_ours(job_id, worker_id):
                    return JobReport(job.session_id, "superseded", 0, any(sent), conflicts)
                if now > busy_until:
                    msg = f"{e}; waited {self.options.busy_wait_s:g}s for it"
                    raise FleetError(msg) from e
                await asyncio.sleep(0.25)
            except (SessionConflictError, IntegrityError) as e:
                conflicts += 1
                if worker_id is not None and not await self._still_ours(job_id, worker_id):
                    log.warning(
                        "session %s: job %d was handed to another worker; stepping aside",
                        job.session_id,
                        job_id,
                    )
                    return JobReport(job.session_id, "superseded", 0, any(sent), conflicts)
                if conflicts > self.options.max_conflicts:
                    msg = (
                        f"session {job.session_id}: {conflicts} write conflicts in a row; "
                        "something else keeps writing to it"
                    )
                    raise FleetError(msg) from e
                await asyncio.sleep(0.05 * conflicts)

    async def _advance_once(
        self, job: SessionJob, job_id: int, conflicts: int, sent: list[bool]
    ) -> JobReport:
        sid = UUID(job.session_id)
        session = self.app.get_session(sid)
        if not Path(session.workspace).is_dir():
            msg = (
                f"session {sid}: its workspace {session.workspace} is not on this worker; "
                "workers need the sessions' workspaces at the same paths"
            )
            raise FleetError(msg)
        base = await self._claim(job_id, sid, session.version)
        send = job.prompt is not None and not self._message_recorded_after(sid, base)
        service = AgentService(
            self.app, session.workspace, provider_factory=self.provider_factory, clock=self.clock
        )
        options = SessionOptions(
            agent=job.agent,
            provider=job.provider,
            model=job.model,
            rules=job.parsed_rules(),
            max_steps=job.max_steps,
            # A parked turn in the way fails the job with its line (the prompt kept in the
            # queue, the parked turn intact).
            message_follows=send,
        )
        handle = await service.open_session(str(sid), options)
        answerer = auto_answerer(job.yes, defer=job.defer)
        try:
            if send:
                assert job.prompt is not None
                updates = handle.send(job.prompt, answerer=answerer)
            else:
                updates = handle.resume(answerer=answerer)
            async for update in updates:
                if isinstance(update, up.UserMessage):  # emitted once the message is saved
                    sent.append(True)
        finally:
            await handle.close()
        outcome = handle.outcome
        if outcome is None:  # pragma: no cover - the stream ends only with an outcome or raises
            raise FleetError(f"session {sid}: the turn ended without an outcome")
        return JobReport(job.session_id, outcome.reason, outcome.steps, bool(sent), conflicts)

    def _message_recorded_after(self, sid: UUID, version: int) -> bool:
        return any(
            event_kind(e) == "UserMessageAdded" for e in self.app.session_events(sid, gt=version)
        )

    async def _claim(self, job_id: int, sid: UUID, version: int) -> int:
        """The session version when this job was first taken (the same for every attempt)."""
        # Two statements, two commits: a racing attempt's INSERT waits for the first one's and
        # does nothing, then its SELECT (a new snapshot) reads the first one's row.
        await self.queue.connector.execute_query_async(
            "INSERT INTO coder_es_fleet_claims (job_id, session_id, base_version)"
            " VALUES (%(job_id)s, %(session_id)s, %(version)s) ON CONFLICT (job_id) DO NOTHING",
            job_id=job_id,
            session_id=str(sid),
            version=version,
        )
        row = await self.queue.connector.execute_query_one_async(
            "SELECT base_version FROM coder_es_fleet_claims WHERE job_id = %(job_id)s",
            job_id=job_id,
        )
        return int(row["base_version"])

    async def schedule_resume(self, job: SessionJob) -> int | None:
        """A session parked on scheduled calls goes back on the queue for the earliest of their
        times (procrastinate's ``schedule_at``): a worker takes it up when the window opens.
        Parked on questions only, it waits for ``approve`` / ``deny``, which queue it.

        The loop decides whether a call is due by its clock (``self.clock``), the queue starts a
        job by the database's. A worker whose clock runs behind the database's would be handed
        the job before its loop finds the call due, park again and queue it again at once: a
        busy loop for as long as the skew. So the wait the loop's clock sees is measured on the
        database's clock instead: the job starts when the deciding clock reaches the time."""
        questions = questions_in(self.app.session_events(UUID(job.session_id)))
        times = [datetime.fromisoformat(q.scheduled_for) for q in questions if q.scheduled_for]
        if not times:
            return None
        wait = max(min(times) - (self.clock or SystemClock()).now(), timedelta(0))
        row = await self.queue.connector.execute_query_one_async("SELECT now() AS now")
        return await self.queue.enqueue(replace(job, prompt=None), schedule_at=row["now"] + wait)

    async def _still_ours(self, job_id: int, worker_id: int) -> bool:
        row = await self.queue.connector.execute_query_one_async(
            "SELECT status::text AS status, worker_id FROM procrastinate_jobs WHERE id = %(id)s",
            id=job_id,
        )
        return row is not None and row["status"] == "doing" and row["worker_id"] == worker_id
