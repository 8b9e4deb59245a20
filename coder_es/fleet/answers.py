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
queues those the fleet ran that have no job queued or running (``sweep_answered``). A job
queued twice for one session is harmless: the session lock runs them one after the other, and
the second finds the turn already taken up (it resumes nothing).
"""

from __future__ import annotations

from dataclasses import replace

from coder_es.application import CoderApp
from coder_es.fleet.jobs import SessionJob
from coder_es.fleet.queue import DEFAULT_QUEUE, FleetQueue
from coder_es.service.waiting import answered_unresumed
from coder_es.store.config import StoreConfig


async def requeue_answered(
    config: StoreConfig, session_id: str, *, queue: str = DEFAULT_QUEUE
) -> int | None:
    """Queue the answered session again (the id of the job), or None when the fleet never ran
    it (no job of it on the queue)."""
    async with FleetQueue(config, queue=queue, max_size=1) as q:
        last: SessionJob | None = await q.last_job(session_id)
        if last is None:
            return None
        return await q.enqueue(replace(last, prompt=None))


async def sweep_answered(app: CoderApp, queue: FleetQueue) -> dict[str, int]:
    """Queue a resume job for every answered, parked session of the fleet that has none queued
    or running (session id -> job id)."""
    queued: dict[str, int] = {}
    for sid in answered_unresumed(app):
        if await queue.has_open_job(sid):
            continue  # queued to start now, or running
        last = await queue.last_job(sid)
        if last is None:
            continue  # not a fleet session: ``run --session S`` takes it up
        queued[sid] = await queue.enqueue(replace(last, prompt=None))
    return queued
