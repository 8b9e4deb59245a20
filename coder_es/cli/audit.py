"""``coder-es export`` and ``coder-es verify``: the audit trail on the command line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from coder_es.audit.export import FORMATS, ExportOptions, export_session
from coder_es.audit.filters import ExportFilter, parse_kinds, parse_time
from coder_es.audit.problems import VerifyReport
from coder_es.audit.verify import verify_export, verify_session, verify_store
from coder_es.cli.context import Context, print_json
from coder_es.cli.progress import shown, working
from coder_es.errors import UsageError


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "export", help="export a session as JSONL, OpenTelemetry (OTLP/JSON), Markdown or HTML"
    )
    p.add_argument("session", help="session id or unique prefix")
    p.add_argument("--format", required=True, choices=FORMATS)
    p.add_argument("-o", "--output", help="write to FILE (default: standard output)")
    p.add_argument("--since", help="only events at or after this ISO time")
    p.add_argument("--until", help="only events at or before this ISO time")
    p.add_argument("--kinds", help="only these event kinds, comma-separated")
    p.add_argument("--branch", metavar="NODE", help="only the path from the root to NODE")
    p.add_argument(
        "--redact-glob",
        action="append",
        default=[],
        metavar="GLOB",
        help="replace the contents of files matching GLOB (repeatable)",
    )
    p.set_defaults(handler=cmd_export)

    p = subparsers.add_parser(
        "verify", help="check the hash chains of a session, of the whole store, or of an export"
    )
    p.add_argument("target", nargs="?", help="session id or prefix, or an exported JSONL file")
    p.add_argument("--all", action="store_true", help="every session and blob in the store")
    p.add_argument("--json", action="store_true", help="machine-readable report")
    p.set_defaults(handler=cmd_verify)


def cmd_export(args: argparse.Namespace, ctx: Context) -> int:
    flt = ExportFilter(
        since=parse_time(args.since, "--since") if args.since else None,
        until=parse_time(args.until, "--until") if args.until else None,
        kinds=parse_kinds(args.kinds) if args.kinds else None,
        branch=args.branch,
    )
    options = ExportOptions(format=args.format, filter=flt, redact_globs=tuple(args.redact_glob))
    with working(f"exporting {args.format}", shown()):
        data = export_session(ctx.app, args.session, options)
    if args.output:
        target = Path(args.output)
        tmp = target.with_name(target.name + ".partial")
        try:
            tmp.write_bytes(data)
            tmp.replace(target)
        except OSError as e:
            msg = f"cannot write {args.output}: {e.strerror or e}"
            raise UsageError(msg) from e
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    return 0


def cmd_verify(args: argparse.Namespace, ctx: Context) -> int:
    if args.all and args.target:
        msg = "verify takes a SESSION, a FILE or --all, not several"
        raise UsageError(msg)
    if args.all:
        with working("verifying every chain and blob", shown(args.json)):
            report = verify_store(ctx.app)
    elif args.target is None:
        msg = "verify needs a SESSION, a FILE or --all"
        raise UsageError(msg)
    elif Path(args.target).is_file() or "/" in args.target or args.target.endswith(".jsonl"):
        report = verify_export(args.target)
    else:
        with working("verifying the session", shown(args.json)):
            report = verify_session(ctx.app, args.target)
    _print(report, args.json)
    return 0 if report.ok else 1


def _print(report: VerifyReport, as_json: bool) -> None:
    if as_json:
        print_json(report.to_json())
        return
    for problem in report.problems:
        print(problem)
    for note in report.notes:
        print(f"note: {note}")
    status = "OK" if report.ok else f"FAILED: {len(report.problems)} problem(s)"
    print(
        f"{report.target}: {status} ({report.sessions} session(s), {report.events} event(s), "
        f"{report.blobs} blob(s) checked)"
    )
