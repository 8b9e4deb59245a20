"""A parked fleet session, answered from any machine, goes back on the queue.

A worker whose turn reaches a deferred question records the wait (``TurnParked``), ends the job
(outcome ``waiting``) and takes other work. ``coder-es approve`` / ``deny`` on the fleet's
PostgreSQL store record the answer and then queue a resume job for the session, with the
settings of the job that ran it last (provider, model, rules, answers); any worker continues the
same turn from the events. A session the fleet never ran is left to ``run --session S``.

Recording the answer and queueing the job are two writes to two stores' tables; an ``approve``
killed between them would leave the session answered and unqueued. So queueing is also derived:
every worker, when it starts and then periodically, sweeps the sessions whose parked turn has
answers it was not taken up with (the index of waiting sessions, ``answered_unresumed``) and
queues them (``sweep_answered``).

Both queue through ``queue_answered``, which makes queueing idempotent: under the session's
queueing lock (a PostgreSQL advisory lock), it reads the session fresh and queues a job only if
the answer is still not taken up and no job will take it up: none queued to start now, none
running that read the session after the answer. So an ``approve`` and a sweep racing (the sweep
running between ``approve``'s two writes) queue one job, not two. A job running that read the
session before the answer (the parked job itself, still finishing) does not count: it would
not see the answer.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from coder_es.application import CoderApp
from coder_es.fleet.queue import DEFAULT_QUEUE, FleetQueue
from coder_es.service.waiting import answered_unresumed, answered_version


@dataclass(frozen=True)
class Queued:
    job_id: int
    """The job that continues the turn (or did)."""
    new: bool
    """True when this call queued it; False when a job queued or run by someone else has."""


async def requeue_answered(
    app: CoderApp, session_id: str, *, queue: str = DEFAULT_QUEUE
) -> Queued | None:
    """After an answer: the job that continues the session (queued now unless one already
    will), or None when the fleet never ran it (no job of it on the queue)."""
    async with FleetQueue(app.config, queue=queue, max_size=2) as q:
        return await queue_answered(app, q, session_id)


async def queue_answered(app: CoderApp, queue: FleetQueue, session_id: str) -> Queued | None:
    """Queue a resume job for an answered parked session of the fleet unless a job will take
    the answer up (or one has): one job per answer, whoever asks and however many at once."""
    async with queue.session_queueing(session_id):
        found = await queue.last_job_with_id(session_id)
        if found is None:
            return None  # not a fleet session: ``run --session S`` takes it up
        last_id, last = found
        since = answered_version(app, session_id)
        if since is None:
            return Queued(last_id, new=False)  # taken up already
        taking_up = await queue.job_taking_up(session_id, since)
        if taking_up is not None:
            return Queued(taking_up, new=False)
        return Queued(await queue.enqueue(replace(last, prompt=None)), new=True)


async def sweep_answered(app: CoderApp, queue: FleetQueue) -> dict[str, int]:
    """Queue a resume job for every answered, parked session of the fleet that no job will
    take up (session id -> job id queued)."""
    queued: dict[str, int] = {}
    for sid in answered_unresumed(app):
        done = await queue_answered(app, queue, sid)
        if done is not None and done.new:
            queued[sid] = done.job_id
    return queued
