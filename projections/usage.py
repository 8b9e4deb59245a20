"""Token usage of a session, with that of the subagents it started (``TaskStarted``) rolled up.

``usage_of(app, session)`` sums ``ModelResponded.usage`` of the session (``own``) and, through
its ``TaskStarted`` events, of its children and their children (``subagents``); ``total`` is
both. Kept apart so a view can show what the subagents cost next to what the session did.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from coder_es.domain.session import Session


@dataclass(frozen=True)
class SessionUsage:
    own: dict[str, int]
    subagents: dict[str, int]

    @property
    def total(self) -> dict[str, int]:
        return dict(Counter(self.own) + Counter(self.subagents))


def usage_of(app: Any, session: UUID) -> SessionUsage:
    own: Counter[str] = Counter()
    subagents: Counter[str] = Counter()
    for event in app.session_events(session):
        if isinstance(event, Session.ModelResponded):
            own.update({k: int(v) for k, v in event.usage.items() if isinstance(v, int)})
        elif isinstance(event, Session.TaskStarted):
            child = usage_of(app, UUID(event.child_session))
            subagents.update(child.total)
    return SessionUsage(dict(own), dict(subagents))
