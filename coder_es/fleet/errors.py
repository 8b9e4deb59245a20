"""Errors of the fleet: a queue that cannot be used, a job that cannot be run."""

from __future__ import annotations

from coder_es.errors import CoderESError, UsageError


class FleetError(CoderESError):
    """The fleet cannot do what was asked (the queue is unreachable, a job keeps conflicting)."""


class FleetUsageError(UsageError):
    """Bad input to the fleet: a backend other than postgres, a malformed job."""


def require_postgres(backend: str, what: str) -> None:
    if backend != "postgres":
        msg = (
            f"{what} needs the postgres backend (the queue and the notification log live in "
            f"PostgreSQL), not {backend!r}: pass --backend postgres or set "
            "CODER_ES_BACKEND=postgres and the POSTGRES_* settings (see docs/postgres.md)"
        )
        raise FleetUsageError(msg)
