"""``coder-es pending``, ``approve`` and ``deny``: the questions parked turns wait for.

``pending`` lists every waiting question of the store; ``approve`` / ``deny`` record the answer
(who and from where) under the session's lease; ``approve --continue`` then continues the turn
in this process, otherwise ``coder-es run --session S`` does. Answering a call that is not
waiting (answered already, never parked) exits 2 with one line.
"""

from __future__ import annotations

import argparse
import sys

from coder_es.cli.context import Context, print_json
from coder_es.cli.questions import _line
from coder_es.service.waiting import Question, answer, pending, pending_read_only

# asyncio and the origin (socket, getpass) are imported by the commands that answer or continue:
# `pending` only reads (start-up time; tests/core/test_cli_startup.py).


def cmd_pending(args: argparse.Namespace, ctx: Context) -> int:
    # An index that is up to date is read without building the application (start-up time).
    reader = ctx.reader()
    questions = None if reader is None else pending_read_only(reader.views, reader.recorder)
    if questions is None:
        questions = pending(ctx.app)
    if args.json:
        for q in questions:
            print_json(q.to_dict())
        return 0
    if not questions:
        print("no question is waiting")
        return 0
    for q in questions:
        print(_line(q))
    return 0


def cmd_approve(args: argparse.Namespace, ctx: Context) -> int:
    from coder_es.agent.origin import origin

    done = answer(
        ctx.app,
        args.session,
        args.calls,
        decision="allow",
        by=origin("coder-es approve"),
        always=args.always,
    )
    _said(done, "allowed" + (" always" if args.always else ""))
    if args.continue_turn:
        return _continue(args, ctx, done[0].session)
    _next_step(ctx, done[0].session)
    return 0


def cmd_deny(args: argparse.Namespace, ctx: Context) -> int:
    from coder_es.agent.origin import origin

    done = answer(
        ctx.app,
        args.session,
        args.calls,
        decision="deny",
        by=origin("coder-es deny"),
        message=args.message,
    )
    _said(done, "denied")
    _next_step(ctx, done[0].session)
    return 0


def _next_step(ctx: Context, session: str) -> None:
    """Who continues the turn: on the fleet's store, a worker (the session is queued again,
    when the fleet ran it); else ``run --session S``."""
    if ctx.config.backend == "postgres":
        import asyncio

        from coder_es.fleet.answers import requeue_answered  # procrastinate: only here
        from coder_es.fleet.errors import FleetError

        try:
            queued = asyncio.run(requeue_answered(ctx.app, session))
        except FleetError as e:
            msg = (
                f"the answer is recorded, but the session could not be queued again ({e}); "
                f"queue it with: coder-es enqueue --session {session}"
            )
            raise FleetError(msg) from e
        if queued is not None:
            # A worker's sweep may have queued it first (one job per answer either way).
            what = "queued session {} again" if queued.new else "session {} is queued"
            job = queued.job_id
            print(f"{what.format(session)} (job {job}): a worker continues the turn")
            return
    print(f"continue the turn: coder-es run --session {session[:8]}", file=sys.stderr)


def _said(done: list[Question], verb: str) -> None:
    for q in done:
        subject = "" if q.subject == q.tool else f" {q.subject}"
        print(f"{verb} {q.call} {q.tool}{subject}")


def _continue(args: argparse.Namespace, ctx: Context, session: str) -> int:
    """The turn goes on here, as ``coder-es run --session S`` would run it (new questions park
    again: this process answers nothing on its own)."""
    import asyncio

    from coder_es.cli.run import _run

    values = dict(vars(args))
    values.update(
        prompt=None,
        image=[],
        allow=[],
        deny=[],
        defer=[None],
        yes=False,
        title="",
        json=False,
        harness=None,
        session=session,
    )
    run_args = argparse.Namespace(**values)
    return asyncio.run(_run(run_args, ctx, []))
