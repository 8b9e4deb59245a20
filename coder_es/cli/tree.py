"""``coder-es tree``, ``diff``, ``fork``, ``checkout``, ``rewind`` and ``label``.

Exit codes: 0 done, 1 a file restoration left a conflict (the file is left as the user has it),
2 bad usage (unknown session or node, a node off the current branch for ``rewind``).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coder_es.cli.context import Context, print_json
from coder_es.cli.plain import cut_lines, rich_plain_width, shown_by_markup
from coder_es.domain.session import ASSISTANT, Session
from coder_es.errors import UsageError
from coder_es.records import summarize
from coder_es.views.tree import Piece, render_markup, tree_json, tree_lines
from projections.files import track_files
from projections.tree import ConversationTree, events_at, track_tree

if TYPE_CHECKING:
    from coder_es.branching import Branching, MoveResult

# `tree` only reads: the branching commands (file restoration, its thread pool) and the progress
# bars are imported by the commands that move (start-up time; tests/core/test_cli_startup.py).


def _branching(ctx: Context, session_ref: str) -> tuple[Branching, str]:
    """The branching commands on this workspace, refusing a session recorded elsewhere."""
    from coder_es.branching import Branching

    app = ctx.app
    sid, recorded = _recorded_workspace(ctx, session_ref)
    if recorded and os.path.isabs(recorded) and os.path.isdir(recorded):
        here = os.path.realpath(ctx.workspace)
        if os.path.realpath(recorded) != here:
            msg = (
                f"session {sid[:8]} belongs to the workspace {recorded}, not {here}; "
                f"pass --workspace {recorded}"
            )
            raise UsageError(msg)
    return Branching(app, Path(ctx.workspace)), sid


def _recorded_workspace(ctx: Context, session_ref: str) -> tuple[str, str | None]:
    """The session's id and the workspace its start recorded, from its first event only: the
    command reads the whole log once itself (``Branching._load``), and a log of restorations
    is long to decode."""
    app = ctx.app
    sid = app.resolve_session(session_ref)
    try:
        first = app.session_events(sid, lte=1)
        recorded = getattr(first[0], "workspace", None)
    except Exception:  # absent or damaged: ``get_session`` names the problem
        session = app.get_session(sid)
        return str(session.id), session.workspace
    return str(sid), recorded if isinstance(recorded, str) else None


# ---------------------------------------------------------------------- tree


def plain_line(line: list[Piece]) -> str:
    """The text rich shows for the line's markup (``render_markup``) without colour: a styled
    piece is followed by its closing tag, the last piece by the end of the line."""
    *pieces, (last, style) = line
    return "".join(text for text, _ in pieces) + (last if style else shown_by_markup(last))


# coder_es.permissions.subagents.TASK_TOOL, not imported: that package loads the shell parser
# (tree-sitter), which `tree` never needs (start-up time; tests/core/test_cli_startup.py).
TASK_TOOL_NAME = "task"


def task_children(app: Any, sid: Any, tree: ConversationTree, events: list[Any]) -> dict[str, str]:
    """The child session of each ``task`` result node (its ``TaskStarted`` lies between the
    response that called it and the result)."""
    out: dict[str, str] = {}
    for e in events:
        if not isinstance(e, Session.ToolCallCompleted) or e.name != TASK_TOOL_NAME:
            continue
        node = str(e.originator_version)
        response = tree.parent_of(node)
        while response is not None and tree.kind(response) != ASSISTANT:
            response = tree.parent_of(response)
        low = int(response) if response is not None else 0
        for between in app.events.get(sid, gt=low, lte=e.originator_version):
            if isinstance(between, Session.TaskStarted) and between.tool_use_id == e.tool_use_id:
                out[node] = between.child_session
    return out


# The width given to ``cut_lines`` for output that is not a terminal: lines are never cut.
UNCUT = 1 << 30


def cmd_tree(args: argparse.Namespace, ctx: Context) -> int:
    sid = ctx.app.resolve_session(args.session)
    # The projections as ``Branching.views`` opens them, without the branching machinery.
    tracked_tree, tracked_files = track_tree(ctx.app, sid), track_files(ctx.app, sid)
    tree, files = tracked_tree.open(), tracked_files.open()
    events = events_at(ctx.app, sid, [int(n) for n in tree.nodes()])
    texts = {str(e.originator_version): summarize(e, 60) for e in events}
    for node, child in task_children(ctx.app, sid, tree, events).items():
        texts[node] = f"[task -> {child[:8]}] {texts[node]}"
    # The next opening replays nothing (nothing is written when nothing was replayed).
    tracked_tree.checkpoint()
    tracked_files.checkpoint()
    if args.json:
        print_json(tree_json(tree, files, texts))
        return 0
    header = f"session {tree.session}  nodes={len(tree)}  head={tree.head_node}"
    if tree.parent_session:
        header += f"  forked from {tree.parent_session[:8]}@{tree.parent_node}"
    top = [header] if len(tree) else [header, "(no messages yet)"]
    lines = tree_lines(tree, files, texts)
    # Not a terminal: plain text, each line whole (a pipe or a file is read by a program, which
    # must not find lines cut or wrapped at some width); without rich, which costs a fraction of
    # the start-up time. Text with a tab is left to rich.
    piped = not sys.stdout.isatty()
    if piped and rich_plain_width(sys.stdout) is not None:
        body = cut_lines([*top, *(plain_line(line) for line in lines)], UNCUT)
        if body is not None:
            sys.stdout.write("".join(f"{line}\n" for line in body))
            return 0
    from rich.console import Console
    from rich.markup import escape

    # emoji=False: a ":name:" in a message is text, and replacing emoji costs per character.
    console = Console(highlight=False, emoji=False, soft_wrap=piped)
    for line in top:
        console.print(escape(line))
    if lines:  # one print: rich's cost is per call, and a tree can have thousands of lines
        markup = render_markup(lines)
        if piped:
            console.print("\n".join(markup))
        else:
            console.print("\n".join(markup), no_wrap=True, overflow="ellipsis")
    return 0


# ---------------------------------------------------------------------- diff


def cmd_diff(args: argparse.Namespace, ctx: Context) -> int:
    from coder_es.views.files import file_patches, render_stat
    from projections.node_diff import node_diff

    # What ``Branching.diff`` reads (the projections opened as ``Branching.views`` opens
    # them), without the branching machinery: `diff` only reads (start-up time).
    app = ctx.app
    session = app.get_session(app.resolve_session(args.session))
    tracked_tree, tracked_files = track_tree(app, session.id), track_files(app, session.id)
    tracked_tree.open()
    tracked_files.open()
    tree, files = tracked_tree.catch_up(), tracked_files.catch_up()
    diff = node_diff(app, session, tree, files, args.node_a, args.node_b)
    patches = file_patches(app, diff)
    if args.json:
        print_json({**diff.to_json(), "files": [p.to_json() for p in patches]})
        return 0
    if args.name_only:
        for patch in patches:
            print(patch.path)
        return 0
    if args.stat:
        print("\n".join(render_stat(patches)))
        return 0
    # Plain text (no markup): a patch can be piped to `git apply`.
    print(f"# {diff.a} vs {diff.b}: common ancestor {diff.common or '(root)'}")
    for side, lines in ((diff.a, diff.only_a), (diff.b, diff.only_b)):
        print(f"# only on the path to {side}: {len(lines)} node(s)")
        for m in lines:
            print(f"#   {m.node:>6} {m.kind:<11} {' '.join(m.text.split())}")
    print(f"# files that differ: {len(patches)}")
    for path, sides in sorted(diff.by_hook.items()):
        for side, hook in sorted(sides.items()):
            node = diff.a if side == "a" else diff.b
            print(f"#   {path} at {node or '(root)'}: made by the hook {hook}")
    for patch in patches:
        sys.stdout.write(patch.patch)
    return 0


# ---------------------------------------------------------------------- moves


def _report(result: MoveResult, as_json: bool) -> int:
    if as_json:
        print_json(result.to_json())
    else:
        if result.forked_from is not None:
            src, node = result.forked_from
            print(f"new session {result.session} forked from {src}@{node}")
        elif result.head_moved:
            print(f"head: {result.previous} -> {result.node} ({result.reason})")
        else:
            print(f"head stays at {result.node}; files of the target restored ({result.reason})")
        for f in result.files:
            extra = f" ({f.detail})" if f.detail else ""
            print(f"  {f.outcome:<9} {f.path}{extra}")
        if result.conflicts:
            print(
                f"{len(result.conflicts)} file(s) left as you have them: your edits overlap "
                "the restored content"
            )
            node = result.forked_from[1] if result.forked_from else result.node
            session = result.forked_from[0] if result.forked_from else result.session
            for f in result.conflicts:
                path = shlex.quote(f.path)
                if f.target is None:
                    print(f"  {f.path}: absent at node {node}; delete it to take that version")
                elif node is not None:
                    print(
                        f"  take the session's {f.path}: "
                        f"coder-es show {session[:8]} {node} {path} > {path}"
                    )
    return 1 if result.conflicts else 0


# Fewer files than this restore in well under a second: no bar.
PROGRESS_MIN_FILES = 50


def cmd_fork(args: argparse.Namespace, ctx: Context) -> int:
    from coder_es.cli.progress import bars, shown

    branching, sid = _branching(ctx, args.session)
    with bars(shown(args.json)) as bar:
        result = branching.fork(
            sid,
            args.node,
            new_session=args.new_session,
            progress=bar("restoring files", PROGRESS_MIN_FILES),
        )
    branching.keep_views()
    return _report(result, args.json)


def cmd_checkout(args: argparse.Namespace, ctx: Context) -> int:
    from coder_es.cli.progress import bars, shown

    branching, sid = _branching(ctx, args.session)
    with bars(shown(args.json)) as bar:
        result = branching.checkout(
            sid, args.node, progress=bar("restoring files", PROGRESS_MIN_FILES)
        )
    branching.keep_views()
    return _report(result, args.json)


def cmd_rewind(args: argparse.Namespace, ctx: Context) -> int:
    from coder_es.cli.progress import bars, shown

    branching, sid = _branching(ctx, args.session)
    conversation = not args.files
    files = not args.conversation
    with bars(shown(args.json)) as bar:
        result = branching.rewind(
            sid,
            args.node,
            conversation=conversation,
            files=files,
            progress=bar("restoring files", PROGRESS_MIN_FILES),
        )
    branching.keep_views()
    return _report(result, args.json)


def cmd_label(args: argparse.Namespace, ctx: Context) -> int:
    from coder_es.branching import Branching

    branching = Branching(ctx.app, Path(ctx.workspace))
    move = branching.label(args.session, args.node, args.name)
    if args.json:
        print_json(move.to_json())
    else:
        print(move.describe())
    return 0
