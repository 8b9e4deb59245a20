"""The throwaway application a replay records into (below ``engine`` and ``harness``, which
both run one)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from coder_es.application import CoderApp
from coder_es.store.config import StoreConfig


class ReplayApp(CoderApp):
    """A ``CoderApp`` that keeps the events it saves for one session, in order, for comparison."""

    # eventsourcing names an application after its class; the store must be CoderApp's own.
    name = CoderApp.name

    def __init__(self, config: StoreConfig | None = None, env: dict[str, str] | None = None):
        super().__init__(config, env)
        if self.config.backend == "popo":
            # A throwaway store is never loaded again: snapshots would only cost time.
            self.snapshotting_intervals = {}  # type: ignore[misc]
        self.watched: UUID | None = None
        self.observed: list[Any] = []
        self.children: dict[UUID, list[Any]] = {}
        """The events of the subagents a live replay runs again, per child session."""

    def watch_child(self, session: UUID) -> list[Any]:
        self.children[session] = []
        return self.children[session]

    def save(self, *objs: Any, **kwargs: Any) -> Any:
        recordings = super().save(*objs, **kwargs)
        for recording in recordings:
            event = recording.domain_event
            if event.originator_id == self.watched:
                self.observed.append(event)
            elif self.children and event.originator_id in self.children:
                self.children[event.originator_id].append(event)
        return recordings
