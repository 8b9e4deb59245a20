"""How the command line shows the questions a parked turn waits for: ``pending`` lists them,
and a run that parks says how to answer them. Below ``run`` and ``waiting``, which both use it."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from coder_es.cli.context import Context
from coder_es.service.waiting import Question, questions_in

if TYPE_CHECKING:
    from rich.console import Console

# rich is imported where a parked run prints through it: `pending` prints plain lines
# (start-up time; tests/core/test_cli_startup.py).


def _line(q: Question) -> str:
    who = q.matched_rule or q.source
    by = q.asked_by
    where = f"{by.get('client', '?')} on {by.get('host', '?')} pid {by.get('pid', '?')}"
    subject = "" if q.subject == q.tool else f" {q.subject}"
    if q.scheduled_for is not None:
        due = datetime.fromisoformat(q.scheduled_for)
        return (
            f"{q.session[:8]} {q.call} {q.tool}{subject}  (scheduled for "
            f"{due:%Y-%m-%d %H:%M} UTC by {who}; runs on the first resume after: "
            f"coder-es run --session {q.session[:8]} or a worker; {where})"
        )
    return (
        f"{q.session[:8]} {q.call} {q.tool}{subject}  "
        f"(asked by {q.source}: {who}; {where}; since {q.since:%Y-%m-%d %H:%M:%S} UTC)"
    )


def how_to_answer(ctx: Context, session: str, err: Console) -> None:
    """After a run that parked: what waits, and the commands that answer it."""
    from rich.markup import escape

    sid = ctx.app.resolve_session(session)
    questions = questions_in(ctx.app.session_events(sid))
    err.print(
        f"waiting: {len(questions)} question(s) of session {sid} wait for an answer (exit 3)",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    for q in questions:
        err.print(f"  {escape(_line(q))}", highlight=False, soft_wrap=True)
    short = str(sid)[:8]
    err.print(
        f"answer: coder-es approve {short} [CALL...] [--always] [--continue] | "
        f"coder-es deny {short} [CALL...] [--message TEXT]; then: coder-es run --session {short}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
