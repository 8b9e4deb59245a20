"""A session's conversation tree as JSON and as lines of rich markup (``coder-es tree``, the
clients' tree requests)."""

from __future__ import annotations

from typing import Any

from projections.files import FileStates
from projections.tree import ConversationTree


def tree_json(tree: ConversationTree, files: FileStates, texts: dict[str, str]) -> dict[str, Any]:
    labelled = tree.labels_by_node()
    return {
        "session": tree.session,
        "head": tree.head_node,
        "parent_session": tree.parent_session,
        "parent_node": tree.parent_node,
        "labels": dict(sorted((k, str(v)) for k, v in tree.labels.items())),
        "nodes": [
            {
                "id": n,
                "kind": tree.kind(n),
                "parent": tree.parent_of(n),
                "children": tree.children(n),
                "labels": labelled.get(n, []),
                "files_changed": files.changed_at(n),
                # path -> the hook whose command changed it there (``hooks``)
                "files_by_hook": files.hooks_at(n),
                "files": files.files_at(n),
                "text": texts.get(n, ""),
            }
            for n in tree.nodes()
        ],
        # What the user's disk held when the session first saw each file (the root's state).
        "files_at_start": files.files_at(None),
        "leaves": tree.leaves(),
        "branch_points": tree.branch_points(),
        "branches": [
            {"fork_point": b.fork_point, "start": b.start, "tip": b.tip} for b in tree.branches()
        ],
    }


Piece = tuple[str, str]
"""Text and its rich style ("": none)."""


def render_tree(tree: ConversationTree, files: FileStates, texts: dict[str, str]) -> list[str]:
    """Lines of rich markup: a single child continues the line, branches indent."""
    return render_markup(tree_lines(tree, files, texts))


def render_markup(lines: list[list[Piece]]) -> list[str]:
    from rich.markup import escape

    return [
        "".join(
            f"[{style}]{escape(text)}[/{style}]" if style else escape(text) for text, style in line
        )
        for line in lines
    ]


def tree_lines(
    tree: ConversationTree, files: FileStates, texts: dict[str, str]
) -> list[list[Piece]]:
    """The lines of ``render_tree`` as styled pieces (plain output joins the texts)."""
    lines: list[list[Piece]] = []
    head = tree.head_node
    labelled = tree.labels_by_node()
    # (node, prefix for its own line, prefix for what follows under it)
    roots = tree.children(None)
    stack: list[tuple[str, str, str]] = []
    for i, child in reversed(list(enumerate(roots))):
        last = i == len(roots) - 1
        if len(roots) > 1:
            stack.append((child, "└─ " if last else "├─ ", "   " if last else "│  "))
        else:
            stack.append((child, "", ""))
    while stack:
        node, own, rest = stack.pop()
        labels = labelled.get(node, ())
        hooked = files.hooks_at(node)
        changed = [f"{p} (hook)" if p in hooked else p for p in files.changed_at(node)]
        text = texts.get(node, "")
        # The text comes last so that a narrow terminal shortens it, never the markers.
        line = [(own, ""), (node, "bold"), (" ", ""), (tree.kind(node), "dim")]
        if node == head:
            line += [(" ", ""), ("<- HEAD", "green bold")]
        if labels:
            line += [(" ", ""), (" ".join(f"[{name}]" for name in labels), "yellow")]
        if changed:
            shown = ", ".join(changed[:4]) + (f" +{len(changed) - 4}" if len(changed) > 4 else "")
            line += [(" ", ""), (f"files: {shown}", "cyan")]
        lines.append([*line, (" ", ""), (text, "")])
        kids = tree.children(node)
        if len(kids) == 1:
            stack.append((kids[0], rest, rest))
        else:
            for i, child in reversed(list(enumerate(kids))):
                last = i == len(kids) - 1
                stack.append(
                    (child, rest + ("└─ " if last else "├─ "), rest + ("   " if last else "│  "))
                )
    return lines
