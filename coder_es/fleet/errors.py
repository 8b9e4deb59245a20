"""Errors of the fleet: a queue that cannot be used, a job that cannot be run."""

from __future__ import annotations

from coder_es.errors import CoderESError
from coder_es.store.postgres_only import FleetUsageError, require_postgres


class FleetError(CoderESError):
    """The fleet cannot do what was asked (the queue is unreachable, a job keeps conflicting)."""


__all__ = ["FleetError", "FleetUsageError", "require_postgres"]
