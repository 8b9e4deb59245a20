"""The index of waiting sessions: what ``pending`` reads instead of folding every parked session.

A projection of the log kept beside the events (``ViewStore`` key ``waiting-index``), always
rebuildable: its record holds the notification id it has read up to, the sessions that ever
parked a question, the questions of the sessions waiting now, and the sessions whose parked turn
has answers it has not been taken up with yet (``ready``: what a fleet worker's sweep queues
again when the answering process died before queueing it). Reading it catches up first:
the notifications after its position whose kinds can change what a session waits for
(``TOUCHING``, read through the store's topic index) name the sessions to fold again, and only
those of them that ever parked are loaded. With nothing new, ``pending`` is one record read and
one empty topic query, whatever the number of sessions in the store.

Losing or damaging the record only costs a rebuild from position 0. Two processes catching up
at once each write a record correct for the position it names (a session folded from events
newer than that position is folded again by the next catch-up), so the last writer wins safely.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from uuid import UUID

from coder_es.store.views import ViewRecord

if TYPE_CHECKING:
    from eventsourcing.persistence import ApplicationRecorder

    from coder_es.application import CoderApp
    from coder_es.store.views import ViewStore

KEY = "waiting-index"
_BATCH = 500
# The kinds that can make a session's waiting questions appear, change or go: a question parked
# or answered, the call closed, the turn taken up or cancelled, the head moved (a new message, a
# new response, a branch switched back to a parked node). Their topics are written out, so that
# reading the index does not import the domain (`pending`'s start-up time; a test checks them
# against the classes of coder_es.domain.session).
_SESSION = "coder_es.domain.session:Session."
TOUCHING = tuple(
    _SESSION + kind
    for kind in (
        "PermissionDeferred", "TurnParked", "CallScheduled", "DeferredAnswered",
        "PermissionDecided", "ToolCallCompleted", "TurnResumed", "TurnCancelled",
        "UserMessageAdded", "ModelResponded", "ContextCompacted", "HeadMoved",
    )
)  # fmt: skip
# Only these make a session one that ever parked (the others touch it only if it did).
_PARKING = frozenset((_SESSION + "PermissionDeferred", _SESSION + "TurnParked"))


@dataclass
class WaitingIndex:
    position: int = 0
    ever: set[str] = field(default_factory=set)
    waiting: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    ready: set[str] = field(default_factory=set)
    """Sessions whose turn is parked with at least one answered call: a resume takes it up."""

    @classmethod
    def decode(cls, record: ViewRecord | None) -> WaitingIndex:
        if record is None:
            return cls()
        try:
            data = json.loads(record.data)
            return cls(
                record.position,
                set(data["ever"]),
                {str(k): list(v) for k, v in data["waiting"].items()},
                # A record written before ``ready`` existed is rebuilt (KeyError below): it
                # could not name the sessions answered meanwhile.
                {str(x) for x in data["ready"]},
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            return cls()  # a damaged record is rebuilt from the log, never trusted

    def encode(self) -> ViewRecord:
        data = {"ever": sorted(self.ever), "waiting": self.waiting, "ready": sorted(self.ready)}
        return ViewRecord(self.position, json.dumps(data, sort_keys=True).encode())


Fold = Callable[[UUID], tuple[list[dict[str, Any]], bool]]
"""One session's waiting questions (as dicts) and whether its parked turn has answers."""


def up_to_date(views: ViewStore, recorder: ApplicationRecorder) -> WaitingIndex | None:
    """The stored index when no event after it can change it (what ``caught_up`` would return
    without folding or writing anything), else None: read by the recorder and the view store
    alone, without the application."""
    index = WaitingIndex.decode(views.get(KEY))
    if index.position == 0:
        return None
    _, position = _touched(recorder, index.position)
    return index if position == index.position else None


def caught_up(app: CoderApp, fold: Fold) -> WaitingIndex:
    """The index brought up to the end of the log: the waiting questions of every session and
    the sessions ready to be taken up (``fold`` reads one session)."""
    index = WaitingIndex.decode(app.views.get(KEY))
    if index.position == 0:
        touched, position = _from_scratch(app)
    else:
        touched, position = _touched(app.recorder, index.position)
    if position == index.position:
        return index
    for sid, parked in touched.items():
        if parked:
            index.ever.add(sid)
        if sid not in index.ever:
            continue
        questions, ready = fold(UUID(sid))
        if questions:
            index.waiting[sid] = questions
        else:
            index.waiting.pop(sid, None)
        if ready:
            index.ready.add(sid)
        else:
            index.ready.discard(sid)
    index.position = position
    try:
        app.views.put(KEY, index.encode())
    except Exception:  # a store opened read-only, or busy: the answer stands, unsaved
        import logging  # only then: `pending`'s start-up time

        logging.getLogger(__name__).debug("the waiting index could not be saved", exc_info=True)
    return index


def _from_scratch(app: CoderApp) -> tuple[dict[str, bool], int]:
    """A rebuild: every session that ever parked (the topic index of ``PermissionDeferred``,
    not every touching event of the log), up to the last notification id. Read before the
    sessions are, so an event recorded meanwhile is caught up with by the next read."""
    from coder_es.domain.session import Session

    position = int(app.recorder.max_notification_id() or 0)
    return {str(sid): True for sid in app.sessions_with(Session.PermissionDeferred)}, position


def _touched(recorder: ApplicationRecorder, after: int) -> tuple[dict[str, bool], int]:
    """The sessions with a touching event after ``after`` (True: one of them parks) and the
    last notification id read."""
    topics = list(TOUCHING)
    touched: dict[str, bool] = {}
    position = after
    while True:
        batch = recorder.select_notifications(start=position + 1, limit=_BATCH, topics=topics)
        for n in batch:
            sid = str(n.originator_id)
            touched[sid] = touched.get(sid, False) or n.topic in _PARKING
        if batch:
            position = max(position, *(int(n.id) for n in batch))
        if len(batch) < _BATCH:
            return touched, position


def rebuild(app: CoderApp) -> None:
    """Forget the stored index: the next read rebuilds it from the whole log."""
    app.views.delete(KEY)
