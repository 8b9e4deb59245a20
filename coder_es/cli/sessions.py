"""``coder-es sessions``, ``show`` and ``doctor``: what is in the store."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from coder_es import __version__
from coder_es.cli.context import Context, print_json
from coder_es.errors import UsageError
from coder_es.records import event_kind, event_record, summarize


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("sessions", help="list the sessions in the store")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=cmd_sessions)

    p = subparsers.add_parser(
        "show", help="show the events of a session, or a file as it was at a node (NODE PATH)"
    )
    p.add_argument("session", help="session id or unique prefix")
    p.add_argument("node", nargs="?", help="with PATH: node id, prefix, label or HEAD")
    p.add_argument("path", nargs="?", help="the file to print as it was at NODE")
    p.add_argument(
        "--proposed",
        action="store_true",
        help="the agent's version that a conflict at NODE left unapplied (take it: > PATH)",
    )
    p.add_argument("--json", action="store_true", help="one JSON event per line")
    p.set_defaults(handler=cmd_show)

    p = subparsers.add_parser("doctor", help="which backend, where, and whether it is healthy")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=cmd_doctor)


def cmd_sessions(args: argparse.Namespace, ctx: Context) -> int:
    sessions = ctx.app.list_sessions()
    if args.json:
        for s in sessions:
            print_json(
                {
                    "id": str(s.id),
                    "title": s.title,
                    "workspace": s.workspace,
                    "agent": s.agent,
                    "provider": s.provider,
                    "model": s.model,
                    "started_at": s.started_at.isoformat(),
                    "parent_session": s.parent_session,
                    "parent_node": s.parent_node,
                }
            )
        return 0
    if not sessions:
        print(f"no sessions in {ctx.config.describe()}")
        return 0
    table = Table(box=None)
    for col in ("id", "started", "agent", "model", "title"):
        table.add_column(col)
    for s in sessions:
        # Titles are the user's first message: cells are markup unless escaped.
        table.add_row(
            str(s.id)[:8],
            s.started_at.strftime("%Y-%m-%d %H:%M"),
            escape(s.agent),
            escape(s.model),
            escape(s.title),
        )
    Console().print(table)
    return 0


def cmd_show(args: argparse.Namespace, ctx: Context) -> int:
    if args.node is not None or args.proposed:
        return _show_file(args, ctx)
    session = ctx.app.get_session(args.session)
    events = ctx.app.session_events(session.id)
    if args.json:
        for event in events:
            print_json(event_record(event))
        return 0
    console = Console()
    console.print(f"session {session.id}  head={session.head}  events={len(events)}", markup=False)
    for event in events:
        console.print(
            f"{event.originator_version:>5}  {event.timestamp:%H:%M:%S}  "
            f"{event_kind(event):<20} {summarize(event, 90)}",
            markup=False,
            highlight=False,
        )
    return 0


def _show_file(args: argparse.Namespace, ctx: Context) -> int:
    from coder_es.cli.file_views import content_at, proposed_at, workspace_path
    from projections.files import open_files

    if args.path is None or args.json:
        raise UsageError("show SESSION NODE PATH prints one file (no --json); see show --help")
    session = ctx.app.get_session(args.session)
    node = session.resolve_node(args.node)
    path = workspace_path(ctx.workspace, args.path)
    if args.proposed:
        data = proposed_at(ctx.app, session.id, node, path)
    else:
        data = content_at(ctx.app, open_files(ctx.app, session.id), str(session.id), node, path)
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.flush()
    return 0


def cmd_doctor(args: argparse.Namespace, ctx: Context) -> int:
    report: dict[str, Any] = {
        "version": __version__,
        "workspace": str(ctx.workspace),
        "backend": ctx.config.backend,
        "store": ctx.config.describe(),
        "durable": ctx.config.durable,
    }
    problems: list[str] = []
    started = time.perf_counter()
    try:
        app = ctx.app
        report["sessions"] = len(app.list_sessions())
        report["max_notification_id"] = app.recorder.max_notification_id()
    except Exception as e:  # doctor reports every failure instead of raising
        problems.append(f"store: {e}")
    report["open_ms"] = round((time.perf_counter() - started) * 1000, 1)
    report["providers"] = {
        "anthropic": bool(os.environ.get("ANTHROPIC_API_KEY")),
        "openai": bool(os.environ.get("OPENAI_API_KEY")),
        "ollama": os.environ.get("OLLAMA_HOST", "http://127.0.0.1:11434"),
        "scripted": True,
    }
    trust = ctx.settings.trust
    report["trust"] = trust.status if trust is not None else "no project config"
    # Not a problem: the user may never want to trust it. Listed so nobody wonders why a
    # project's allow rule does not apply.
    report["ignored"] = ctx.settings.ignored_lines()
    report["problems"] = problems
    report["healthy"] = not problems
    if args.json:
        print_json(report)
    else:
        for key, value in report.items():
            if key != "ignored":
                print(f"{key:>20}: {value}")
        for line in report["ignored"]:
            print(f"{'ignored':>20}: {line}")
    return 0 if not problems else 1
