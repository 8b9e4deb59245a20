"""``coder-es export`` and ``coder-es verify``: the audit trail on the command line."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from coder_es.audit.export import ExportOptions, export_session
from coder_es.audit.filters import ExportFilter, parse_kinds, parse_time
from coder_es.audit.problems import VerifyReport
from coder_es.audit.verify import (
    verify_export,
    verify_missing_store,
    verify_session,
    verify_store,
)
from coder_es.cli.context import Context, NoStoreError, print_json
from coder_es.cli.progress import shown, working
from coder_es.errors import UsageError


def cmd_export(args: argparse.Namespace, ctx: Context) -> int:
    flt = ExportFilter(
        since=parse_time(args.since, "--since") if args.since else None,
        until=parse_time(args.until, "--until") if args.until else None,
        kinds=parse_kinds(args.kinds) if args.kinds else None,
        branch=args.branch,
    )
    if args.output == "":
        raise UsageError("--output needs a file name (leave it out to write to standard output)")
    if args.format is None:
        args.format = "otel" if args.push else _format_of(args.output)
    options = ExportOptions(
        format=args.format,
        filter=flt,
        redact_globs=tuple(args.redact_glob),
        children=not args.no_children,
        capture_content=_content_opted_in(args, ctx),
    )
    if args.push:
        return _push(args, ctx, options)
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
        print(f"wrote {args.output} ({args.format}, {len(data):,} bytes)", file=sys.stderr)
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    return 0


# What a file name's suffix says of the format (OTLP/JSON is the one .json format).
FORMAT_OF_SUFFIX = {
    ".jsonl": "jsonl",
    ".md": "md",
    ".markdown": "md",
    ".html": "html",
    ".htm": "html",
    ".json": "otel",
}


def _format_of(output: str | None) -> str:
    suffix = Path(output).suffix.lower() if output else ""
    if suffix in FORMAT_OF_SUFFIX:
        return FORMAT_OF_SUFFIX[suffix]
    where = f"the suffix of {output!r} names none" if output else "writing to standard output"
    raise UsageError(f"export needs --format jsonl|otel|md|html ({where})")


def _content_opted_in(args: argparse.Namespace, ctx: Context) -> bool:
    if args.format != "otel":
        return False
    from coder_es.telemetry.settings import content_opted_in

    return content_opted_in(os.environ, ctx.settings.telemetry)


def _push(args: argparse.Namespace, ctx: Context, options: ExportOptions) -> int:
    if args.format != "otel" or args.output:
        raise UsageError("--push sends spans: it goes with --format otel and without --output")
    from coder_es.audit.export import prepare
    from coder_es.telemetry.push import push_session
    from coder_es.telemetry.settings import TelemetrySettings

    settings = TelemetrySettings.resolve(os.environ, ctx.settings.telemetry)
    if settings is None:
        msg = (
            "--push needs an OTLP endpoint: set OTEL_EXPORTER_OTLP_ENDPOINT (or "
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) or telemetry.endpoint in the user config"
        )
        raise UsageError(msg)
    prepared = prepare(ctx.app, args.session, options)
    result = push_session(prepared, settings, lambda line: print(line, file=sys.stderr))
    print(f"pushed {result.exported} of {result.spans} span(s) to {result.endpoint}")
    return 0 if result.lost == 0 else 1


def cmd_verify(args: argparse.Namespace, ctx: Context) -> int:
    if args.all and args.target:
        msg = "verify takes a SESSION, a FILE or --all, not several"
        raise UsageError(msg)
    if args.all:
        try:
            app = ctx.app
        except NoStoreError:
            # The whole store is gone: its witness (outside it) still says what it held.
            missing = verify_missing_store(ctx.config)
            if missing is None:
                raise
            report = missing
        else:
            with working("verifying every chain and blob", shown(args.json)):
                report = verify_store(app)
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
