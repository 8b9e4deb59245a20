"""``coder-es worker``, ``coder-es enqueue`` and ``coder-es project``: the fleet on PostgreSQL.

``enqueue PROMPT`` creates a session in the workspace and queues it; ``enqueue --session ID
[PROMPT]`` queues a new message for a session (or, without PROMPT, its resumption). ``worker``
takes jobs until stopped (SIGINT/SIGTERM let running jobs finish) or, with ``--until-empty``,
until nothing is left to start. ``project`` follows the notification log and keeps the sessions
summary view up to date; ``--until-caught-up`` stops once it has processed every event committed so
far, ``--check`` then compares the view with a rebuild from zero (exit 1 if they differ).
All of them need the postgres backend (docs/postgres.md).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from coder_es.cli.context import Context, print_json
from coder_es.errors import UsageError
from coder_es.permissions.rules import parse_rule
from coder_es.providers.script_file import resolve_script
from coder_es.store.postgres_only import require_postgres

# The queue library (procrastinate, in the postgres extra) is imported only by these commands,
# so the rest of the CLI works without it.


def _logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("procrastinate").setLevel(logging.INFO if verbose else logging.WARNING)


# ---------------------------------------------------------------------- worker


def cmd_worker(args: argparse.Namespace, ctx: Context) -> int:
    require_postgres(ctx.config.backend, "coder-es worker")
    from coder_es.fleet.worker import FleetWorker, WorkerOptions

    _logging(args.verbose)
    options = WorkerOptions(
        concurrency=args.concurrency,
        queue=args.queue,
        name=args.name,
        heartbeat_s=args.heartbeat,
        stall_timeout_s=args.stall_timeout,
        reap_interval_s=min(2.0, args.stall_timeout / 2),
        until_empty=args.until_empty,
    )
    worker = FleetWorker(ctx.config, options, telemetry=ctx.settings.telemetry)
    try:
        asyncio.run(worker.run())
    finally:
        worker.close()
    # Exit 1 when a job failed or a turn ended badly (a daemon stopped by a signal exits 0).
    bad_turns = [r for r in worker.reports if r.outcome in ("error", "max_steps")]
    return 1 if (worker.failures or bad_turns) and args.until_empty else 0


# ---------------------------------------------------------------------- enqueue


def _job_settings(args: argparse.Namespace) -> tuple[str | None, str | None]:
    if args.script is not None:
        return args.provider or "scripted", str(resolve_script(args.script))
    model = args.model
    if model and model.endswith((".json", ".jsonl")):
        model = str(Path(model).resolve())  # workers may run elsewhere in the tree
    return args.provider, model


def cmd_enqueue(args: argparse.Namespace, ctx: Context) -> int:
    require_postgres(ctx.config.backend, "coder-es enqueue")
    if not args.prompt and not args.session:
        raise UsageError("enqueue needs a PROMPT (or --session ID to resume a session)")
    if args.max_steps < 1:
        raise UsageError("--max-steps must be at least 1")
    rules = [("allow", r) for r in args.allow] + [("deny", r) for r in args.deny]
    rules += [("defer", r) for r in args.defer if r is not None]
    rules += [("schedule", r) for r in args.schedule]
    for action, text in rules:
        parse_rule(text, action)
    provider, model = _job_settings(args)
    return asyncio.run(_enqueue(args, ctx, provider, model, tuple(rules)))


async def _enqueue(
    args: argparse.Namespace,
    ctx: Context,
    provider: str | None,
    model: str | None,
    rules: tuple[tuple[str, str], ...],
) -> int:
    from coder_es.fleet.jobs import SessionJob
    from coder_es.fleet.queue import FleetQueue
    from coder_es.fleet.script import fleet_provider_factory
    from coder_es.service.api import AgentService, SessionOptions

    app = ctx.app
    created = False
    if args.session:
        session_id = str(app.resolve_session(args.session))
        if args.prompt:
            from coder_es.service.waiting import refuse_prompt_while_parked

            refuse_prompt_while_parked(app, session_id)
    else:
        if provider is None:
            raise UsageError("a new session needs --provider (or --script for the scripted one)")
        service = AgentService(app, ctx.workspace, provider_factory=fleet_provider_factory())
        handle = await service.create_session(
            SessionOptions(
                agent=args.agent,
                provider=provider,
                model=model,
                rules=tuple(parse_rule(t, a) for a, t in rules),
                max_steps=args.max_steps,
                title=args.title or args.prompt[:80],
            )
        )
        await handle.close()
        session_id, created = handle.id, True
    job = SessionJob(
        session_id=session_id,
        prompt=args.prompt or None,
        yes=args.yes,
        defer=None in args.defer,
        provider=provider,
        model=model,
        agent=args.agent,
        rules=rules,
        max_steps=args.max_steps,
    )
    async with FleetQueue(ctx.config, queue=args.queue) as queue:
        if not created and provider is None and model is None:
            previous = await queue.last_job(session_id)
            if previous is not None:  # e.g. the script of a scripted session
                job = replace(job, provider=previous.provider, model=previous.model)
        job_id = await queue.enqueue(job)
    if args.json:
        print_json({"session_id": session_id, "job_id": job_id, "created": created})
    else:
        verb = "created and queued" if created else "queued"
        print(f"session {session_id} {verb} (job {job_id})")
    return 0


# ---------------------------------------------------------------------- project


def cmd_project(args: argparse.Namespace, ctx: Context) -> int:
    from coder_es.fleet.projection import (
        caught_up,
        compare_with_rebuild,
        open_summary_view,
        run_summary_projection,
    )

    require_postgres(ctx.config.backend, "coder-es project")
    _logging(False)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    until = caught_up if args.until_caught_up else None
    if args.view == "search":
        what = "search index"
        position, problems = _project_search(args, ctx, stop, until)
    else:
        what = "sessions summary"
        position = run_summary_projection(ctx.config, stop=stop, until=until)
        problems = (
            compare_with_rebuild(ctx.app, open_summary_view(ctx.config)) if args.check else []
        )
    if args.json:
        print_json({"position": position, "checked": args.check, "problems": problems})
    else:
        print(f"{what} at notification {position}")
        for problem in problems:
            print(problem, file=sys.stderr)
        if args.check and not problems:
            print(f"the {what} matches a rebuild from zero")
    return 1 if problems else 0


def _project_search(
    args: argparse.Namespace,
    ctx: Context,
    stop: threading.Event,
    until: Callable[[Any], bool] | None,
) -> tuple[int, list[str]]:
    from coder_es.fleet.projection import run_projection
    from projections.search.index import rebuild
    from projections.search.postgres_index import (
        PostgresSearchIndex,
        SearchProjection,
        SearchView,
    )
    from projections.search.sqlite_index import SQLiteSearchIndex

    position = run_projection(ctx.config, SearchProjection, SearchView, stop=stop, until=until)
    if not args.check:
        return position, []
    kept = PostgresSearchIndex(ctx.config)
    rows = kept.rows()
    kept.close()
    fresh = SQLiteSearchIndex(":memory:")  # the rows a rebuild gives, to compare with the view
    try:
        rebuild(ctx.app, fresh)
        same = fresh.rows() == rows
    finally:
        fresh.close()
    return position, [] if same else ["the search index differs from a rebuild from zero"]
