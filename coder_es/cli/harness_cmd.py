"""``run --harness`` / ``chat --harness``: another agent CLI run as a recorded coder-es session.

``run --session S`` on a harness session continues it through the harness (no ``--harness``
needed; one given must name the session's own). The renderer and ``--json`` form are those of
native runs. Exit codes: 0 the turn ended, 1 it ended on an error, 2 bad usage (a missing CLI,
another harness than the session's), 130 cancelled.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from typing import Any

from rich.console import Console

from coder_es.cli.context import Context, print_json
from coder_es.cli.run import Renderer, report_ignored
from coder_es.errors import UsageError
from coder_es.harness.runner import HarnessSession
from coder_es.harness.spec import parse_harness


def is_harness_run(args: argparse.Namespace, ctx: Context) -> bool:
    """``--harness`` given, or ``--session`` naming a harness session."""
    if getattr(args, "harness", None):
        return True
    ref = getattr(args, "session", None)
    if not ref:
        return False
    try:
        session = ctx.app.get_session(ref)
    except Exception:  # a native run reports an unknown session itself
        return False
    return bool((session.settings or {}).get("harness"))


def _open(args: argparse.Namespace, ctx: Context) -> HarnessSession:
    report_ignored(ctx)
    configured = dict(ctx.settings.harnesses)
    spec = parse_harness(args.harness, configured) if args.harness else None
    for flag, given in (
        ("--provider", args.provider),
        ("--model", args.model),
        ("--script", args.script),
    ):
        if given:
            msg = f"{flag} does not apply to a harness session: the harness chooses its own model"
            raise UsageError(msg)
    kw: dict[str, Any] = {
        "yes": args.yes,
        "network": ctx.settings.sandbox.network,
        "store_path": ctx.app.config.path.resolve(),
    }
    if args.agent:
        kw["agent"] = args.agent
    if args.session:
        return HarnessSession.open(ctx.app, ctx.workspace, args.session, spec, **kw)
    assert spec is not None
    kw["title"] = args.title or (getattr(args, "prompt", None) or "")[:80]
    return HarnessSession.create(ctx.app, ctx.workspace, spec, **kw)


@contextlib.contextmanager
def _sigint_cancels(session: HarnessSession) -> Any:
    loop = asyncio.get_running_loop()
    try:
        loop.add_signal_handler(signal.SIGINT, session.cancel)
        installed = True
    except (NotImplementedError, RuntimeError):
        installed = False
    try:
        yield
    finally:
        if installed:
            loop.remove_signal_handler(signal.SIGINT)


async def _turn(session: HarnessSession, prompt: str, as_json: bool, renderer: Renderer) -> int:
    with _sigint_cancels(session):
        async for update in session.send(prompt):
            if as_json:
                print_json(update.to_dict())
                sys.stdout.flush()
            else:
                renderer.show(update)
    outcome = session.outcome
    if outcome is None or outcome.reason == "cancelled":
        return 130
    return 1 if outcome.reason == "error" else 0


def harness_run(args: argparse.Namespace, ctx: Context) -> int:
    if not args.prompt:
        raise UsageError("run --harness needs a PROMPT")
    if args.image:
        raise UsageError("--image is not supported with a harness")
    session = _open(args, ctx)
    renderer = Renderer(Console(), Console(stderr=True))
    return asyncio.run(_turn(session, args.prompt, args.json, renderer))


def harness_chat(args: argparse.Namespace, ctx: Context) -> int:
    """One turn per line read from the terminal (or stdin), until end of input or ``/exit``."""
    session = _open(args, ctx)
    renderer = Renderer(Console(), Console(stderr=True))
    code = 0
    while True:
        try:
            line = input("> ")
        except EOFError:
            return code
        text = line.strip()
        if text in ("/exit", "/quit"):
            return code
        if not text:
            continue
        code = asyncio.run(_turn(session, text, args.json, renderer))
