"""How a user names a node: ``HEAD``, a node id, a label, or a unique prefix of a node id.

The rules, once for every command and view (the tree projection, the branching commands, the
exports, the clients):

- One label names one node at a time: labelling another node with the same name moves the label
  (``NodeLabelled`` events apply in order, see ``label_positions``).
- A label name cannot look like a node reference: names made of digits (``12``, ``-3``: node ids,
  and the renumbered nodes of a forked session's context) and ``HEAD`` are refused when the label
  is created (``check_label_name``), so every label can always be reached.
- A reference resolves in this order (``resolve_ref``): ``HEAD`` (the head node); a node id; a
  label (a label recorded before names were checked, such as ``7``, is reachable while no node
  has that id); a unique prefix of a node id.

Pure functions, no I/O: the domain uses them for its own commands, the projections for views.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping

from coder_es.errors import UnknownNodeError, UsageError

HEAD = "HEAD"
_NODE_LIKE = re.compile(r"-?[0-9]+")


def check_label_name(name: str) -> None:
    """Refuse a label name that is empty or could be read as a node reference."""
    if not name.strip():
        raise UsageError("a label needs a non-empty name")
    if name == HEAD:
        raise UsageError("HEAD names the head node; it cannot be a label")
    if _NODE_LIKE.fullmatch(name):
        msg = f"the label {name!r} looks like a node id; choose a name with a letter in it"
        raise UsageError(msg)


def label_positions(assignments: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Where each label points after these (name, node) assignments, in the order they were
    made: the last one of a name wins; labels are ordered by when they last moved."""
    out: dict[str, str] = {}
    for name, node in assignments:
        out.pop(name, None)
        out[name] = node
    return out


def labels_by_node(positions: Mapping[str, str]) -> dict[str, list[str]]:
    """The labels each node carries: every label once, at the node it names now."""
    out: dict[str, list[str]] = {}
    for name, node in positions.items():
        out.setdefault(node, []).append(name)
    return out


def resolve_ref(
    ref: str,
    *,
    session: str,
    nodes: Collection[str],
    labels: Mapping[str, str],
    head: str | None,
) -> str:
    """The node ``ref`` names (the order is in the module docstring)."""
    if ref == HEAD:
        if head is None:
            raise UnknownNodeError(session, ref, reason="the session has no node yet")
        return head
    if ref in nodes:
        return ref
    if ref in labels:
        return labels[ref]
    matches = sorted((n for n in nodes if n.startswith(ref)), key=int) if ref else []
    if len(matches) == 1:
        return matches[0]
    raise UnknownNodeError(session, ref, candidates=matches[:10])
