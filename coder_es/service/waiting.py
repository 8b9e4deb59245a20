"""Parked questions: listing them across the store and answering them from any process.

A turn that reaches a deferred question (``PermissionDeferred``) stops in a recorded waiting
state (``TurnParked``). Everything needed to go on is in the log, so the answer can come from
another process or machine: ``answer`` records who decided and from where
(``DeferredAnswered``) followed by the decision itself (``PermissionDecided``, the event every
projection and replay already reads), under the session's lease (one writer per session: two
processes answering at once record one decision, the other gets ``SessionBusyError`` or finds
the call answered). The turn then continues with ``run --session S`` (or ``approve
--continue``): the decider sees the decision and runs (or closes) the call, and the model's
next request holds its result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from coder_es.errors import UsageError
from coder_es.service.waiting_index import Fold, caught_up, up_to_date

if TYPE_CHECKING:
    from eventsourcing.persistence import ApplicationRecorder

    from coder_es.agent.state import LoopState
    from coder_es.application import CoderApp
    from coder_es.store.views import ViewStore

# The domain model is imported by the functions that read events: `pending` on an index that is
# up to date reads none (`pending_read_only`, start-up time).


@dataclass(frozen=True)
class Question:
    """One parked question: which call of which session, what it would do, who parked it
    (``source``, the rule or hook, the process that parked the turn) and since when."""

    session: str
    call: str
    tool: str
    subject: str
    source: str
    matched_rule: str | None
    reason: str | None
    asked_by: dict[str, Any]
    since: datetime
    suggested_pattern: str | None
    scheduled_for: str | None = None
    """A scheduled call: when its window opens (ISO 8601 UTC); it runs on a resume after."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "call": self.call,
            "tool": self.tool,
            "subject": self.subject,
            "source": self.source,
            "matched_rule": self.matched_rule,
            "reason": self.reason,
            "asked_by": dict(self.asked_by),
            "since": self.since.isoformat(),
            "scheduled_for": self.scheduled_for,
        }

    def to_record(self) -> dict[str, Any]:
        """``to_dict`` and what an ``--always`` answer covers (the waiting index keeps it)."""
        return {**self.to_dict(), "suggested_pattern": self.suggested_pattern}

    @classmethod
    def from_record(cls, d: dict[str, Any]) -> Question:
        return cls(
            session=d["session"],
            call=d["call"],
            tool=d["tool"],
            subject=d["subject"],
            source=d["source"],
            matched_rule=d["matched_rule"],
            reason=d["reason"],
            asked_by=dict(d["asked_by"]),
            since=datetime.fromisoformat(d["since"]),
            suggested_pattern=d.get("suggested_pattern"),
            scheduled_for=d.get("scheduled_for"),
        )


def questions_in(events: Sequence[Any]) -> list[Question]:
    """The questions of a session's events still waiting for an answer, in call order."""
    # Here, not at the top: the loop's state imports the agent's settings (providers'
    # defaults), which `pending` needs only for a session touched since the index's last read.
    from coder_es.agent.state import LoopState

    return _questions(LoopState.from_events(events), events)


def is_ready(state: LoopState) -> bool:
    """The turn is parked and some of its calls have an answer: a resume takes it up (the
    runner's own test, ``AgentRunner._resume``)."""
    return state.parked is not None and any(
        c.deferred and c.decision is not None for c in state.open_calls()
    )


def refuse_prompt_while_parked(app: CoderApp, session: str) -> None:
    """``UsageError`` (one line: what the turn waits for, how to answer) when the session's
    turn is parked, so that a prompt queued for it (``enqueue``, which opens no session) is
    refused at once. A session opened to send one refuses it as it opens
    (``SessionOptions.message_follows``); the loop refuses it again under the session lease
    (``decider.parked_in_the_way``), for every other way a message comes."""
    from coder_es.agent.decider import parked_in_the_way
    from coder_es.agent.state import LoopState

    sid = app.resolve_session(session)
    refused = parked_in_the_way(LoopState.from_events(app.session_events(sid)), str(sid))
    if refused is not None:
        raise UsageError(refused)


def _questions(state: LoopState, events: Sequence[Any]) -> list[Question]:
    from coder_es.domain.session import Session

    waiting = {c.id for c in state.waiting_calls()}
    if not waiting:
        return []
    deferred: dict[str, Any] = {}
    parked_by: dict[str, dict[str, Any]] = {}
    for e in events:
        if isinstance(e, Session.PermissionDeferred) and e.tool_use_id in waiting:
            deferred[e.tool_use_id] = e
        elif isinstance(e, Session.TurnParked):
            for cid in e.tool_use_ids:
                parked_by[cid] = dict(e.by)
    out = []
    for c in state.waiting_calls():
        e = deferred[c.id]
        out.append(
            Question(
                session=str(e.originator_id),
                call=c.id,
                tool=e.tool,
                subject=e.subject,
                source=e.source,
                matched_rule=e.matched_rule,
                reason=e.reason,
                asked_by=parked_by.get(c.id, {}),
                since=e.timestamp,
                suggested_pattern=e.suggested_pattern,
                scheduled_for=c.due,
            )
        )
    return out


def pending(app: CoderApp) -> list[Question]:
    """Every waiting question of the store, oldest first, read from the index of waiting
    sessions (``waiting_index``): only sessions touched since its last read are loaded."""

    return _listed(caught_up(app, _folder(app)).waiting)


def pending_read_only(views: ViewStore, recorder: ApplicationRecorder) -> list[Question] | None:
    """``pending``'s answer when the index of waiting sessions is up to date, read without the
    application (``summaries.StoreReader``); None when a session must be folded first."""
    index = up_to_date(views, recorder)
    return None if index is None else _listed(index.waiting)


def _listed(waiting: dict[str, list[dict[str, Any]]]) -> list[Question]:
    out = [Question.from_record(d) for questions in waiting.values() for d in questions]
    return sorted(out, key=lambda q: (q.since, q.session))


def due(questions: Sequence[Question], now: datetime) -> list[Question]:
    """The scheduled calls among ``questions`` whose time has come by ``now`` (a loop's clock):
    a resume runs them without anyone answering."""
    return [
        q for q in questions if q.scheduled_for and datetime.fromisoformat(q.scheduled_for) <= now
    ]


def answered_unresumed(app: CoderApp) -> list[str]:
    """The sessions whose parked turn has answers but was not taken up yet (sorted), from the
    same index: what a fleet worker queues again if the answering process died before it could
    (``fleet.answers.sweep_answered``)."""
    return sorted(caught_up(app, _folder(app)).ready)


def answered_version(app: CoderApp, session: str) -> int | None:
    """Read fresh from the session's log (not the index): when its parked turn has answers not
    taken up yet, the version of the last answer (``DeferredAnswered``); else None. A reader
    that loaded the session at this version or later has seen the answer."""
    from coder_es.agent.state import LoopState
    from coder_es.domain.session import Session

    events = app.session_events(UUID(session))
    if not is_ready(LoopState.from_events(events)):
        return None
    versions = [
        int(e.originator_version) for e in events if isinstance(e, Session.DeferredAnswered)
    ]
    return versions[-1] if versions else 0


def _folder(app: CoderApp) -> Fold:
    def fold(sid: UUID) -> tuple[list[dict[str, Any]], bool]:
        from coder_es.agent.state import LoopState

        events = app.session_events(sid)
        state = LoopState.from_events(events)
        # The stored (redacted) form: what is listed may leave the terminal.
        return [q.to_record() for q in _questions(state, events)], is_ready(state)

    return fold


def pending_of(app: CoderApp, session: str) -> list[Question]:
    """One session's waiting questions, from the same index as ``pending`` (a client opening a
    session: no fold of its whole log)."""
    return [q for q in pending(app) if q.session == session]


def answer(
    app: CoderApp,
    session_ref: str,
    calls: Sequence[str],
    *,
    decision: str,
    by: dict[str, Any],
    always: bool = False,
    message: str | None = None,
) -> list[Question]:
    """Record the answer to the named parked calls (all of them when ``calls`` is empty);
    returns the questions answered. A call that is not waiting (answered already, never
    parked, closed since) is a ``UsageError`` naming it, and nothing is recorded."""
    if decision not in ("allow", "deny"):
        msg = f"an answer is allow or deny, not {decision!r}"
        raise ValueError(msg)
    sid = app.resolve_session(session_ref)
    with app.leases.hold(str(sid), f"answer ({decision})"):
        # The real subjects (the loop decides on them; the sealing seals them again on save).
        events = app.unsealed_events(sid)
        waiting = {q.call: q for q in questions_in(events)}
        chosen = _chosen(sid, events, waiting, calls)
        session = app.get_session(sid)
        for q in chosen:
            reason = message if decision == "deny" else None
            if decision == "deny" and not reason:
                reason = "rejected by the user"
            session.answer_deferred(tool_use_id=q.call, decision=decision, by=by)
            session.decide_permission(
                tool_use_id=q.call,
                tool=q.tool,
                subject=q.subject,
                decision=decision,
                scope="always" if always else "once",
                pattern=q.suggested_pattern if always else None,
                matched_rule=q.matched_rule,
                decided_by="user",
                reason=reason,
            )
        app.save(session)
    return chosen


def _chosen(
    sid: UUID, events: Sequence[Any], waiting: dict[str, Question], calls: Sequence[str]
) -> list[Question]:
    if not calls:
        if not waiting:
            msg = f"session {sid} has no question waiting for an answer"
            raise UsageError(msg)
        return list(waiting.values())
    chosen = []
    for ref in calls:
        matches = [cid for cid in waiting if cid == ref or cid.startswith(ref)]
        if len(matches) != 1:
            raise UsageError(_not_waiting(sid, events, ref))
        chosen.append(waiting[matches[0]])
    return list({q.call: q for q in chosen}.values())


def _not_waiting(sid: UUID, events: Sequence[Any], ref: str) -> str:
    """One line saying why a call cannot be answered now."""
    from coder_es.domain.session import Session

    answered = [
        e
        for e in events
        if isinstance(e, Session.PermissionDecided)
        and (e.tool_use_id == ref or e.tool_use_id.startswith(ref))
    ]
    if answered:
        e = answered[-1]
        return (
            f"call {e.tool_use_id} of session {sid} is not waiting: it was already answered "
            f"({e.decision}, by {e.decided_by})"
        )
    return f"call {ref} of session {sid} is not waiting for an answer"
