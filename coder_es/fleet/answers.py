"""A parked fleet session, answered from any machine, goes back on the queue.

A worker whose turn reaches a deferred question records the wait (``TurnParked``), ends the job
(outcome ``waiting``) and takes other work. ``coder-es approve`` / ``deny`` on the fleet's
PostgreSQL store record the answer and then queue a resume job for the session, with the
settings of the job that ran it last (provider, model, rules, answers); any worker continues the
same turn from the events. A session the fleet never ran is left to ``run --session S``.
"""

from __future__ import annotations

from dataclasses import replace

from coder_es.fleet.jobs import SessionJob
from coder_es.fleet.queue import DEFAULT_QUEUE, FleetQueue
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
