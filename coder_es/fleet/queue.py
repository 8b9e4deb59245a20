"""The queue adapter: procrastinate in the same PostgreSQL database (and schema) as the events.

One task, ``coder_es.advance_session``, on the queue ``sessions`` (by default). Every job of a
session carries the lock ``session:<id>``: procrastinate never starts a job while another job with
the same lock is running, and starts same-lock jobs in the order they were queued. That is what
keeps two workers off one session; the session aggregate's optimistic concurrency is the last line
of defence (see ``worker``).

The schema (procrastinate's tables and functions, and the fleet's own ``coder_es_fleet_claims``)
is created on first use, under an advisory lock so that workers starting together do not race.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Any, LiteralString, Self

import procrastinate
from procrastinate import exceptions as pexc

from coder_es.fleet.errors import FleetError
from coder_es.fleet.jobs import SessionJob
from coder_es.store.config import StoreConfig
from coder_es.store.postgres_only import require_postgres

TASK_NAME = "coder_es.advance_session"
DEFAULT_QUEUE = "sessions"
# Any fixed 64-bit number; names the fleet's schema-setup critical section in pg_advisory_lock.
_SCHEMA_LOCK = 0x636F646572_6573


CLAIMS_DDL: LiteralString = (
    "CREATE TABLE IF NOT EXISTS coder_es_fleet_claims ("
    " job_id bigint PRIMARY KEY,"
    " session_id text NOT NULL,"
    " base_version integer NOT NULL,"
    " claimed_at timestamptz NOT NULL DEFAULT now())"
)


@dataclass(frozen=True)
class QueueCounts:
    todo: int = 0
    doing: int = 0
    succeeded: int = 0
    failed: int = 0
    other: int = 0

    @property
    def open(self) -> int:
        return self.todo + self.doing


def connector_for(config: StoreConfig, *, max_size: int = 3) -> procrastinate.PsycopgConnector:
    """A procrastinate connector on the store's database, in the store's schema."""
    require_postgres(config.backend, "the fleet queue")
    kwargs: dict[str, Any] = dict(config.postgres_conninfo())
    if not kwargs.get("password"):
        kwargs.pop("password", None)
    kwargs["options"] = f"-c search_path={config.postgres_schema()}"
    return procrastinate.PsycopgConnector(kwargs=kwargs, min_size=1, max_size=max_size)


class FleetQueue:
    """Puts session jobs on the queue and reports on it. Use as an async context manager."""

    def __init__(self, config: StoreConfig, *, queue: str = DEFAULT_QUEUE, max_size: int = 3):
        self.config = config
        self.queue = queue
        self.connector = connector_for(config, max_size=max_size)
        self.app = procrastinate.App(connector=self.connector)

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def open(self) -> None:
        try:
            await self.app.open_async()
        except Exception as e:  # psycopg's pool raises several kinds
            raise FleetError(f"cannot reach the queue at {self.config.describe()}: {e}") from e
        await self.ensure_schema()

    async def close(self) -> None:
        await self.app.close_async()

    async def ensure_schema(self) -> None:
        schema = self.config.postgres_schema()
        async with self.connector.pool.connection() as conn:
            await conn.execute("SELECT pg_advisory_lock(%s)", (_SCHEMA_LOCK,))
            try:
                cur = await conn.execute(
                    "SELECT to_regclass(%s)", (f"{schema}.procrastinate_jobs",)
                )
                row = await cur.fetchone()
                if row is None or row[0] is None:
                    await conn.execute(self.app.schema_manager.get_schema())
                await conn.execute(CLAIMS_DDL)
                await conn.commit()
            finally:
                await conn.execute("SELECT pg_advisory_unlock(%s)", (_SCHEMA_LOCK,))
                await conn.commit()

    async def enqueue(self, job: SessionJob, *, schedule_at: datetime | None = None) -> int:
        """Queue ``job``; with ``schedule_at``, no worker starts it before that time (a
        scheduled call's window)."""
        deferrer = self.app.configure_task(
            TASK_NAME, queue=self.queue, lock=job.lock, schedule_at=schedule_at
        )
        return int(await deferrer.defer_async(**job.to_args()))

    async def enqueue_many(self, jobs: Iterable[SessionJob]) -> list[int]:
        return [await self.enqueue(job) for job in jobs]

    async def last_job(self, session_id: str) -> SessionJob | None:
        """The most recent job queued for a session (a follow-up reuses its model settings)."""
        last = await self.last_job_with_id(session_id)
        return None if last is None else last[1]

    async def last_job_with_id(self, session_id: str) -> tuple[int, SessionJob] | None:
        rows = await self.connector.execute_query_all_async(
            "SELECT id, args FROM procrastinate_jobs WHERE lock = %(lock)s"
            " AND task_name = %(task)s ORDER BY id DESC LIMIT 1",
            lock=f"session:{session_id}",
            task=TASK_NAME,
        )
        return (int(rows[0]["id"]), SessionJob.from_args(rows[0]["args"])) if rows else None

    @contextlib.asynccontextmanager
    async def session_queueing(self, session_id: str) -> AsyncIterator[None]:
        """Hold the session's queueing lock (a PostgreSQL advisory lock, for one transaction):
        whoever queues a session for an answer (``approve`` / ``deny``, every worker's sweep)
        checks for a job and queues one inside it, so two of them never both queue."""
        async with self.connector.pool.connection() as conn, conn.transaction():
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                (f"coder_es.queueing:session:{session_id}",),
            )
            yield

    async def job_taking_up(self, session_id: str, since_version: int) -> int | None:
        """A job of the session that will read (or has read) it at ``since_version`` or later:
        one queued to start now (it reads the session when it starts), or one running that read
        it at that version or later (its claim), or has not claimed it yet."""
        rows = await self.connector.execute_query_all_async(
            "SELECT j.id FROM procrastinate_jobs j"
            " LEFT JOIN coder_es_fleet_claims c ON c.job_id = j.id"
            " WHERE j.lock = %(lock)s AND j.task_name = %(task)s AND ("
            " (j.status = 'todo' AND (j.scheduled_at IS NULL OR j.scheduled_at <= now()))"
            " OR (j.status = 'doing' AND (c.base_version IS NULL"
            " OR c.base_version >= %(version)s)))"
            " ORDER BY j.id DESC LIMIT 1",
            lock=f"session:{session_id}",
            task=TASK_NAME,
            version=since_version,
        )
        return int(rows[0]["id"]) if rows else None

    async def counts(self) -> QueueCounts:
        rows = await self.connector.execute_query_all_async(
            "SELECT status::text AS status, count(*) AS n FROM procrastinate_jobs "
            "WHERE queue_name = %(queue)s GROUP BY status",
            queue=self.queue,
        )
        found = {r["status"]: int(r["n"]) for r in rows}
        known = ("todo", "doing", "succeeded", "failed")
        return QueueCounts(
            todo=found.get("todo", 0),
            doing=found.get("doing", 0),
            succeeded=found.get("succeeded", 0),
            failed=found.get("failed", 0),
            other=sum(n for k, n in found.items() if k not in known),
        )

    async def job_status(self, job_id: int) -> str:
        try:
            status = await self.app.job_manager.get_job_status_async(job_id)
        except pexc.ProcrastinateException as e:
            raise FleetError(f"job {job_id}: {e}") from e
        return str(status.value)

    async def live_workers(self) -> int:
        row = await self.connector.execute_query_one_async(
            "SELECT count(*) AS n FROM procrastinate_workers"
        )
        return int(row["n"])
