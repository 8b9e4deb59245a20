"""Errors of the fleet: a queue that cannot be used, a job that cannot be run."""

from __future__ import annotations

from coder_es.errors import CoderESError


class FleetError(CoderESError):
    """The fleet cannot do what was asked (the queue is unreachable, a job keeps conflicting)."""
