"""``coder-es acp`` (an Agent Client Protocol agent on stdio) and ``coder-es serve`` (WebSocket).

Both take the provider like ``run`` does (``--provider``, ``--model``, ``--script`` for the
scripted provider; else the configuration, else ``CODER_ES_SCRIPT``) and watch the config files:
a good edit applies to the next permission question and the next session, a broken one keeps the
last good configuration and is reported (stderr; ``serve`` also tells connected clients).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from coder_es.cli.context import Context, configured_agent
from coder_es.clients.runtime import ClientRuntime, choose_provider
from coder_es.config import Overrides


def _runtime(args: argparse.Namespace, ctx: Context, *, check: bool = True) -> ClientRuntime:
    choice = choose_provider(
        ctx.settings, provider=args.provider, model=args.model, script=args.script
    )
    runtime = ClientRuntime(
        ctx.app,
        ctx.workspace,
        ctx.settings,
        choice,
        agent=configured_agent(ctx),
        overrides=Overrides.from_args(args),
    )
    if check:  # a harness brings its own model
        runtime.check_provider()
    runtime.turn_ended = ctx.end_turn
    return runtime


def _logging() -> None:
    logging.basicConfig(
        stream=sys.stderr, level=logging.WARNING, format="coder-es %(levelname)s: %(message)s"
    )


def cmd_acp(args: argparse.Namespace, ctx: Context) -> int:
    from coder_es.clients.acp_agent import serve_stdio

    _logging()
    harness = None
    if getattr(args, "harness", None):
        # Another agent CLI runs the sessions; coder-es is the ACP bridge in front of it.
        from coder_es.harness.spec import parse_harness, resolve_command

        harness = parse_harness(args.harness, dict(ctx.settings.harnesses))
        resolve_command(harness, {**os.environ, **harness.env})  # one clear line if missing
    runtime = _runtime(args, ctx, check=harness is None)
    asyncio.run(serve_stdio(runtime, watch=not args.no_watch, harness=harness))
    return 0


def cmd_serve(args: argparse.Namespace, ctx: Context) -> int:
    from coder_es.clients.ws_server import run_server

    _logging()
    runtime = _runtime(args, ctx)
    try:
        asyncio.run(run_server(runtime, watch=not args.no_watch))
    except KeyboardInterrupt:
        pass
    return 0
