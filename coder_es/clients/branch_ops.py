"""Fork, switch (checkout), rewind, label, diff and the tree, for a session a client has open.

The commands are ``coder_es.branching``'s; what this adds is the client's view: they are refused
while a turn runs (the turn's loop holds the session), and after one the caller reloads its
``SessionHandle`` (``SessionHandle.reload``) so the next turn starts from the moved head.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.text import Text

from coder_es.application import CoderApp
from coder_es.branching import Branching, LabelMove, MoveResult
from coder_es.records import summarize
from coder_es.views.files import file_patches, render_stat
from coder_es.views.tree import render_tree, tree_json
from projections.tree import events_at


def fork(
    app: CoderApp, workspace: Path, session: str, node: str | None, *, new_session: bool
) -> MoveResult:
    return Branching(app, workspace).fork(session, node, new_session=new_session)


def switch(app: CoderApp, workspace: Path, session: str, node: str) -> MoveResult:
    return Branching(app, workspace).checkout(session, node)


def rewind(
    app: CoderApp,
    workspace: Path,
    session: str,
    node: str,
    *,
    conversation: bool = True,
    files: bool = True,
) -> MoveResult:
    return Branching(app, workspace).rewind(session, node, conversation=conversation, files=files)


def label(app: CoderApp, workspace: Path, session: str, node: str, name: str) -> LabelMove:
    return Branching(app, workspace).label(session, node, name)


def diff_text(app: CoderApp, workspace: Path, session: str, a: str, b: str) -> str:
    """Two nodes compared as ``coder-es diff --stat`` shows them."""
    diff = Branching(app, workspace).diff(session, a, b)
    lines = [f"{diff.a} vs {diff.b}: common ancestor {diff.common or '(root)'}"]
    for side, turns in ((diff.a, diff.only_a), (diff.b, diff.only_b)):
        lines.append(f"only on the path to {side}: {len(turns)} node(s)")
        lines += [f"  {t.node:>6} {t.kind:<11} {' '.join(t.text.split())}" for t in turns]
    patches = file_patches(app, diff)
    lines.append(f"files that differ: {len(patches)}")
    lines += render_stat(patches)
    return "\n".join(lines)


def _texts(app: CoderApp, branching: Branching, session: str) -> tuple[Any, Any, dict[str, str]]:
    sid = app.resolve_session(session)
    tree = branching.tree(sid)
    files = branching.files(sid)
    events = events_at(app, sid, [int(n) for n in tree.nodes()])
    return tree, files, {str(e.originator_version): summarize(e, 60) for e in events}


def tree_data(app: CoderApp, workspace: Path, session: str) -> dict[str, Any]:
    branching = Branching(app, workspace)
    tree, files, texts = _texts(app, branching, session)
    return tree_json(tree, files, texts)


def tree_text(app: CoderApp, workspace: Path, session: str) -> str:
    """The tree as ``coder-es tree`` draws it, without colour."""
    branching = Branching(app, workspace)
    tree, files, texts = _texts(app, branching, session)
    lines = [f"session {tree.session}  nodes={len(tree)}  head={tree.head_node}"]
    lines += [Text.from_markup(line).plain for line in render_tree(tree, files, texts)]
    if not len(tree):
        lines.append("(no messages yet)")
    return "\n".join(lines)
