"""``coder-es record-cassette``, ``replay`` and ``demo``.

``record-cassette SESSION -o FILE`` exports a stored session as a cassette (``replay.cassette``).
``replay CASSETTE... [--mode verify|live] [--json]`` replays cassettes (files, or folders of
``*.cassette.jsonl``) with the current code; exit 0 when every replay is identical, 1 when one
diverged, 2 when one cannot be read. ``demo`` replays a bundled cassette in live mode into a
scratch workspace, writes the session to this workspace's store and shows its tree.
"""

from __future__ import annotations

import argparse
import difflib
import sys
import uuid
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

import replay
from coder_es.cli.context import Context, print_json
from coder_es.cli.progress import bars, shown, working
from coder_es.errors import UsageError
from coder_es.redaction import Redactor
from coder_es.workspace.git_state import GitStateError
from replay.cassette import (
    SUFFIX,
    Cassette,
    CassetteError,
    export_session,
    find_cassettes,
    load_cassette,
    write_cassette,
)
from replay.engine import MODES, ReplayOptions, replay_cassette
from replay.report import EXIT_DIVERGED, EXIT_IDENTICAL, EXIT_UNREADABLE, ReplayReport

DEMO_CASSETTE = "branched-rewind"
DEMO_DIR = "coder-es-demo"
# Progress bars only for cassettes (and runs of cassettes) long enough to take a moment.
PROGRESS_MIN_EVENTS = 200


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("record-cassette", help="export a session as a replay cassette")
    p.add_argument("session", help="session id or unique prefix")
    p.add_argument("-o", "--output", required=True, help=f"the cassette file (*{SUFFIX})")
    p.add_argument(
        "--touched-only",
        action="store_true",
        help="include only the files the session touched, not the rest of the workspace",
    )
    p.add_argument(
        "--max-steps", type=int, default=None, help="the step limit the session ran with"
    )
    p.set_defaults(handler=cmd_record)

    p = subparsers.add_parser("replay", help="replay cassettes with the current code")
    p.add_argument("cassettes", nargs="+", metavar="CASSETTE", help="cassette files or folders")
    p.add_argument("--mode", choices=MODES, default="verify", help="verify (default) or live")
    p.add_argument("--json", action="store_true", help="one JSON report per cassette per line")
    p.add_argument(
        "--keep-workspace", action="store_true", help="keep the scratch workspace of each replay"
    )
    p.add_argument(
        "--repo",
        action="append",
        default=[],
        metavar="PATH",
        help="live mode: a git repository holding the commit the session started at "
        "(default: the recorded repository, then the workspace)",
    )
    p.set_defaults(handler=cmd_replay)

    p = subparsers.add_parser(
        "demo", help="replay a bundled session live, then show its tree (no API key needed)"
    )
    p.add_argument(
        "--cassette", default=DEMO_CASSETTE, help=f"bundled cassette name (default {DEMO_CASSETTE})"
    )
    p.add_argument(
        "--dir", default=DEMO_DIR, help=f"where the demo workspaces go (default ./{DEMO_DIR})"
    )
    p.add_argument("--list", action="store_true", help="list the bundled cassettes")
    p.set_defaults(handler=cmd_demo)


# ---------------------------------------------------------------------- record-cassette


def redactor_for(ctx: Context) -> Redactor:
    """The environment's redaction plus the workspace configuration's names and patterns."""
    configured = ctx.settings.redaction
    return Redactor.with_settings(configured.env_vars, configured.patterns)


def cmd_record(args: argparse.Namespace, ctx: Context) -> int:
    if args.max_steps is not None and args.max_steps < 1:
        raise UsageError("--max-steps must be at least 1")
    options = {"max_steps": args.max_steps} if args.max_steps else {}
    with working("recording the cassette", shown()):
        cassette = export_session(
            ctx.app,
            args.session,
            redactor=redactor_for(ctx),
            include_workspace=not args.touched_only,
            options=options,
        )
        path = write_cassette(cassette, args.output)
    red = cassette.redactions
    print(
        f"wrote {path}: {len(cassette.events)} events, {len(cassette.files)} initial files, "
        f"{len(cassette.blobs)} blobs; redacted {red.get('events', 0)} event(s) and "
        f"{red.get('blobs', 0)} blob(s)"
        + (f" ({', '.join(red['markers'])})" if red.get("markers") else "")
    )
    if red.get("missing_blobs"):
        print(
            f"note: {len(red['missing_blobs'])} referenced blob(s) were not in the store",
            file=sys.stderr,
        )
    return 0


# ---------------------------------------------------------------------- replay


def cmd_replay(args: argparse.Namespace, ctx: Context) -> int:
    paths = find_cassettes(args.cassettes)
    reports: list[ReplayReport] = []
    unreadable: list[tuple[str, str]] = []
    with bars(shown(args.json)) as progress:
        overall = progress("cassettes", min_total=2)
        for done, path in enumerate(paths):
            overall(done, len(paths))
            try:
                cassette = load_cassette(path)
            except CassetteError as e:
                unreadable.append((str(path), str(e)))
                if args.json:
                    print_json(
                        {"cassette": str(path), "ok": False, "unreadable": True, "error": str(e)}
                    )
                else:
                    print(f"{path}: UNREADABLE {e}")
                continue
            options = ReplayOptions(
                mode=args.mode,
                progress=progress(cassette.name, PROGRESS_MIN_EVENTS),
                keep_workspace=args.keep_workspace,
                repositories=(*map(Path, args.repo), ctx.workspace),
            )
            try:
                report = replay_cassette(cassette, options)
            except GitStateError as e:
                unreadable.append((str(path), str(e)))
                if args.json:
                    print_json({"cassette": str(path), "ok": False, "error": str(e)})
                else:
                    print(f"{path}: CANNOT REPLAY {e}")
                continue
            reports.append(report)
            if args.json:
                print_json({**report.to_json(), "path": str(path)})
            else:
                print(report.render() if not report.ok else report.summary())
            sys.stdout.flush()
    failed = [r for r in reports if not r.ok]
    if len(paths) > 1:
        summary: dict[str, Any] = {
            "cassettes": len(paths),
            "identical": len(reports) - len(failed),
            "diverged": len(failed),
            "unreadable": len(unreadable),
            "failures": [
                {"cassette": r.cassette, "summary": r.divergence.summary}
                for r in failed
                if r.divergence is not None
            ]
            + [{"cassette": p, "summary": f"unreadable: {e}"} for p, e in unreadable],
        }
        if args.json:
            print_json({"summary": summary})
        else:
            print(
                f"{len(paths)} cassettes: {summary['identical']} identical, {len(failed)} "
                f"diverged, {len(unreadable)} unreadable"
            )
            for f in summary["failures"]:
                print(f"  {f['cassette']}: {f['summary']}")
    if unreadable:
        return EXIT_UNREADABLE
    return EXIT_DIVERGED if failed else EXIT_IDENTICAL


# ---------------------------------------------------------------------- demo


def bundled_cassettes() -> Path:
    """The cassettes in the repository (found beside the ``replay`` package)."""
    folder = Path(replay.__file__).resolve().parent.parent / "fixtures" / "sessions"
    if not folder.is_dir() or not any(folder.glob(f"*{SUFFIX}")):
        msg = (
            f"the bundled cassettes are not at {folder}: `coder-es demo` needs coder-es "
            "installed from a checkout of its repository (pip install -e .)"
        )
        raise UsageError(msg)
    return folder


def cmd_demo(args: argparse.Namespace, ctx: Context) -> int:
    folder = bundled_cassettes()
    if args.list:
        for path in sorted(folder.glob(f"*{SUFFIX}")):
            print(path.name.removesuffix(SUFFIX))
        return 0
    path = folder / f"{args.cassette.removesuffix(SUFFIX)}{SUFFIX}"
    if not path.is_file():
        names = ", ".join(p.name.removesuffix(SUFFIX) for p in sorted(folder.glob(f"*{SUFFIX}")))
        raise UsageError(f"no bundled cassette named {args.cassette!r} (there are: {names})")
    cassette = load_cassette(path)
    session_id = uuid.uuid4()
    root = (ctx.workspace / args.dir / str(session_id)[:8]).resolve()
    err = Console(stderr=True, highlight=False)
    err.print(
        f"[bold]coder-es demo[/bold]: replaying [cyan]{escape(cassette.name)}[/cyan] "
        f"({len(cassette.events)} events, {cassette.count('ModelResponded')} model turns) live "
        f"into {escape(str(root))}"
    )
    with bars(shown()) as progress:
        options = ReplayOptions(
            mode="live",
            workspace=root,
            keep_workspace=True,
            session_id=session_id,
            progress=progress(cassette.name),
            repositories=(ctx.workspace,),
        )
        report = replay_cassette(cassette, options, store=ctx.config)
    print(report.summary())
    if not report.ok:
        print(report.render())
        return EXIT_DIVERGED
    from coder_es.cli.tree import cmd_tree

    print()
    cmd_tree(argparse.Namespace(session=str(session_id), json=False), ctx)
    print()
    _print_file_changes(cassette, root)
    sid = str(session_id)[:8]
    store = ctx.config.path
    print()
    print("try next:")
    for line in (
        "coder-es sessions",
        f"coder-es show {sid}",
        f"coder-es tree {sid}",
        f"coder-es --workspace {root} --store {store} checkout {sid} v1",
        f"coder-es replay {path}",
    ):
        print(f"  {line}")
    return 0


def _print_file_changes(cassette: Cassette, root: Path) -> None:
    """How the demo workspace differs from where the session started."""
    changed = []
    now = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
    for rel in sorted(set(cassette.files) | now):
        digest = cassette.files.get(rel)
        before = cassette.blob(digest).decode("utf-8", "replace") if digest else ""
        target = root / rel
        after = target.read_text("utf-8", "replace") if target.is_file() else ""
        if before != after:
            changed.append((rel, before, after))
    print(f"files changed in {root} since the session started: {len(changed)}")
    for rel, before, after in changed:
        diff = difflib.unified_diff(
            before.splitlines(), after.splitlines(), f"a/{rel}", f"b/{rel}", lineterm=""
        )
        for line in diff:
            print(f"  {line}")
