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
from replay.engine import ReplayOptions, replay_cassette
from replay.harness import CannotReplay
from replay.report import EXIT_DIVERGED, EXIT_IDENTICAL, EXIT_UNREADABLE, ReplayReport

# Progress bars only for cassettes long enough to take a moment.
PROGRESS_MIN_EVENTS = 200


# ---------------------------------------------------------------------- record-cassette


def redactor_for(ctx: Context) -> Redactor:
    """The environment's redaction plus the workspace configuration's names and patterns."""
    configured = ctx.settings.redaction
    return Redactor.with_settings(configured.env_vars, configured.patterns)


def cmd_record(args: argparse.Namespace, ctx: Context) -> int:
    if args.max_steps is not None and args.max_steps < 1:
        raise UsageError("--max-steps must be at least 1")
    if not args.output:
        raise UsageError("--output needs a file name")
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
    for repo in args.repo:
        if not Path(repo).is_dir():
            raise UsageError(f"--repo {repo}: not a directory (a git repository is expected)")
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
                # Live mode calls the configured MCP servers; verify mode needs none.
                mcp_servers=tuple(ctx.settings.mcp_servers.values()),
                network=ctx.settings.sandbox.network,
                # A harness session's live replay runs its configured harness.
                harnesses=ctx.settings.harnesses,
            )
            try:
                report = replay_cassette(cassette, options)
            except (GitStateError, CannotReplay) as e:
                unreadable.append((str(path), str(e)))
                if args.json:
                    print_json(
                        {
                            "cassette": str(path),
                            "ok": False,
                            "status": "could not run",
                            "error": str(e),
                        }
                    )
                else:
                    print(f"{path}: CANNOT REPLAY {e}")
                continue
            reports.append(report)
            if args.json:
                print_json({**report.to_json(), "path": str(path)})
            else:
                # render() also names the kept scratch workspace (--keep-workspace).
                print(report.render() if not report.ok or report.workspace else report.summary())
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
    """The cassettes shipped in the package (``coder_es/data/sessions``)."""
    from coder_es.data import SESSIONS

    if not SESSIONS.is_dir() or not any(SESSIONS.glob(f"*{SUFFIX}")):
        msg = (
            f"the bundled cassettes are missing from {SESSIONS}: this installation of coder-es "
            "is incomplete (reinstall it)"
        )
        raise UsageError(msg)
    return SESSIONS


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
    target = _checkout_target(ctx, session_id)
    print()
    print("try next:")
    for line in (
        "coder-es sessions",
        f"coder-es show {sid}",
        f"coder-es tree {sid}",
        f"coder-es --workspace {root} --store {store} checkout {sid} {target}" if target else "",
        f"coder-es replay {path}",
    ):
        if line:
            print(f"  {line}")
    return 0


def _checkout_target(ctx: Context, session_id: uuid.UUID) -> str | None:
    """A node worth checking out in the replayed session: a label it has, else its first node
    off the head's path (a branch the session left), else its first node."""
    from projections.tree import open_tree

    tree = open_tree(ctx.app, session_id)
    if tree.labels:
        return sorted(tree.labels)[0]
    nodes = tree.nodes()
    if not nodes:
        return None
    on_path = set(tree.path(tree.head_node))
    off = [n for n in nodes if n not in on_path]
    return (off or nodes)[0]


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
