"""The sessions summary as a projection process following the notification log.

``SessionsSummaryView`` is a ``PostgresTrackingRecorder``: the summary rows live in
``coder_es_session_summary`` and the position reached in ``sessions_summary_tracking``, both in
the store's schema, and every event's row update commits in the same transaction as its tracking
record. Each event therefore counts exactly once: a restarted process resumes after the last
committed position, and an event already tracked (a second process started by mistake) is
skipped, not counted twice.

``run_summary_projection`` runs eventsourcing's ``ProjectionRunner``, whose subscription reads the
log and then waits on LISTEN/NOTIFY for new events.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable
from typing import Any

from eventsourcing.dispatch import singledispatchmethod
from eventsourcing.persistence import Tracking
from eventsourcing.postgres import PostgresDatastore, PostgresTrackingRecorder
from eventsourcing.projection import Projection, ProjectionRunner
from psycopg.sql import SQL, Identifier

from coder_es.application import ChainedLog, CoderApp
from coder_es.fleet.summary import SessionRow, all_events, fold, rebuild
from coder_es.store.config import StoreConfig
from coder_es.store.ddl import store_setup_lock
from coder_es.store.postgres_only import projection_env

PROJECTION_NAME = "sessions_summary"
SUMMARY_TABLE = "coder_es_session_summary"
_COLUMNS = (
    "session_id",
    "title",
    "workspace",
    "status",
    "events",
    "user_messages",
    "model_turns",
    "tool_calls",
    "tool_errors",
    "last_version",
    "last_activity",
)


class SessionLog(ChainedLog):
    """The sessions' event log, read-only here (same name, so the same tables as ``CoderApp``)."""

    name = CoderApp.name


class SessionsSummaryView(PostgresTrackingRecorder):
    def __init__(self, datastore: PostgresDatastore, **kwargs: Any) -> None:
        super().__init__(datastore, **kwargs)
        self.table = SQL("{0}.{1}").format(Identifier(datastore.schema), Identifier(SUMMARY_TABLE))
        self.sql_create_statements.append(
            SQL(
                "CREATE TABLE IF NOT EXISTS {0} ("
                "session_id text PRIMARY KEY, title text NOT NULL, workspace text NOT NULL, "
                "status text NOT NULL, events integer NOT NULL, user_messages integer NOT NULL, "
                "model_turns integer NOT NULL, tool_calls integer NOT NULL, "
                "tool_errors integer NOT NULL, last_version integer NOT NULL, "
                "last_activity timestamptz)"
            ).format(self.table)
        )
        self._lock_key = zlib.crc32(f"{datastore.schema}.{self.tracking_table_name}".encode())

    def apply(self, event: Any, tracking: Tracking) -> bool:
        """Fold ``event`` into its session's row and track it, atomically. False: already done."""
        with self.datastore.transaction(commit=True) as curs:
            # One writer at a time per view, so "already tracked?" cannot change under us.
            curs.execute("SELECT pg_advisory_xact_lock(%s)", (self._lock_key,))
            curs.execute(self.max_tracking_id_statement, (tracking.application_name,))
            found = curs.fetchone()
            done = found["max"] if found else None
            if done is not None and done >= tracking.notification_id:
                return False
            key = str(event.originator_id)
            curs.execute(SQL("SELECT * FROM {0} WHERE session_id = %s").format(self.table), (key,))
            existing = curs.fetchone()
            row = fold(SessionRow(**existing) if existing else None, event)
            values = [getattr(row, c) for c in _COLUMNS]
            curs.execute(
                SQL(
                    "INSERT INTO {0} ({1}) VALUES ({2}) ON CONFLICT (session_id) DO UPDATE SET {3}"
                ).format(
                    self.table,
                    SQL(", ").join(Identifier(c) for c in _COLUMNS),
                    SQL(", ").join(SQL("%s") for _ in _COLUMNS),
                    SQL(", ").join(
                        SQL("{0} = EXCLUDED.{0}").format(Identifier(c)) for c in _COLUMNS[1:]
                    ),
                ),
                values,
            )
            self._insert_tracking(curs, tracking)
        return True

    def rows(self) -> dict[str, SessionRow]:
        with self.datastore.transaction(commit=False) as curs:
            curs.execute(SQL("SELECT * FROM {0}").format(self.table))
            return {r["session_id"]: SessionRow(**r) for r in curs.fetchall()}

    def position(self) -> int:
        return self.max_tracking_id(CoderApp.name) or 0


class SessionsSummaryProjection(Projection[SessionsSummaryView]):
    name = PROJECTION_NAME
    topics = ()  # every event counts

    @singledispatchmethod
    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        self.view.apply(domain_event, tracking)


def open_summary_view(config: StoreConfig) -> SessionsSummaryView:
    """The view alone (for reading it, or comparing it with a rebuild)."""
    from eventsourcing.persistence import InfrastructureFactory
    from eventsourcing.utils import Environment

    env = Environment(PROJECTION_NAME, projection_env(config))
    with store_setup_lock(config):
        factory = InfrastructureFactory[SessionsSummaryView].construct(env=env)
        return factory.tracking_recorder(SessionsSummaryView)


def run_summary_projection(
    config: StoreConfig,
    *,
    stop: threading.Event,
    until: Callable[[Any], bool] | None = None,
    poll_s: float = 0.2,
) -> int:
    """Follow the log until ``stop`` is set (or ``until(runner)`` holds). Returns the position."""
    return run_projection(
        config,
        SessionsSummaryProjection,
        SessionsSummaryView,
        stop=stop,
        until=until,
        poll_s=poll_s,
    )


def run_projection(
    config: StoreConfig,
    projection_class: type[Projection[Any]],
    view_class: type[Any],
    *,
    stop: threading.Event,
    until: Callable[[Any], bool] | None = None,
    poll_s: float = 0.2,
) -> int:
    """Run ``projection_class`` into ``view_class`` (a tracking recorder with ``position()``)
    until ``stop`` is set or ``until(runner)`` holds; returns the position reached."""
    with store_setup_lock(config):
        runner: ProjectionRunner[SessionLog, Any] = ProjectionRunner(
            application_class=SessionLog,
            projection_class=projection_class,
            view_class=view_class,
            env=projection_env(config),
        )
    with runner:
        while not stop.is_set():
            runner.run_forever(timeout=poll_s)  # re-raises a failure of the processing thread
            if until is not None and until(runner):
                break
        return int(runner.view.position())


def caught_up(runner: ProjectionRunner[SessionLog, Any]) -> bool:
    """The view has processed every event committed so far."""
    latest = runner.app.recorder.max_notification_id() or 0
    return runner.view.position() >= latest


def compare_with_rebuild(app: Any, view: SessionsSummaryView) -> list[str]:
    """Differences between the view and a rebuild from zero (empty: they match)."""
    expected = rebuild(all_events(app))
    actual = view.rows()
    problems: list[str] = []
    for key in sorted(set(expected) | set(actual)):
        want, got = expected.get(key), actual.get(key)
        if want != got:
            problems.append(f"session {key}: view has {got}, a rebuild gives {want}")
    return problems
