"""Two nodes of a session compared (``coder-es diff``): the turns on each side since they
diverged, and the files that differ. A read of the tree and file projections only, so the
command that shows it needs none of the branching machinery (file restoration, its thread
pool; start-up time, issue 35); ``Branching.diff`` reads through it too."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from coder_es.records import summarize
from projections.tree import events_at

if TYPE_CHECKING:
    from coder_es.domain.session import NodeId, Session
    from projections.files import FileDiff, FileStates
    from projections.tree import ConversationTree


@dataclass(frozen=True)
class MessageLine:
    node: NodeId
    kind: str
    text: str

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "kind": self.kind, "text": self.text}


@dataclass(frozen=True)
class NodeDiff:
    """Two nodes compared: the turns on each side since they diverged, and the files."""

    session: str
    a: NodeId | None
    b: NodeId | None
    common: NodeId | None
    only_a: tuple[MessageLine, ...]
    only_b: tuple[MessageLine, ...]
    files: tuple[FileDiff, ...]
    by_hook: dict[str, dict[str, str]] = field(default_factory=dict)
    """path -> side ("a", "b") -> the hook whose command made that side's content."""

    def to_json(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "a": self.a,
            "b": self.b,
            "common": self.common,
            "only_a": [m.to_json() for m in self.only_a],
            "only_b": [m.to_json() for m in self.only_b],
            "files": [f.to_json() for f in self.files],
            "files_by_hook": self.by_hook,
        }


def node_diff(
    app: Any, s: Session, tree: ConversationTree, files: FileStates, a: str, b: str
) -> NodeDiff:
    """Nodes ``a`` and ``b`` of session ``s`` (refs resolved by the session), compared."""
    na, nb = s.resolve_node(a), s.resolve_node(b)
    common, only_a, only_b = tree.diverging(na, nb)
    versions = [int(n) for n in only_a + only_b]
    events = {e.originator_version: e for e in events_at(app, s.id, versions)}

    def lines(nodes: list[NodeId]) -> tuple[MessageLine, ...]:
        return tuple(MessageLine(n, tree.kind(n), summarize(events[int(n)], 200)) for n in nodes)

    differ = tuple(files.diff(na, nb))
    by_hook: dict[str, dict[str, str]] = {}
    for f in differ:
        for side, node in (("a", na), ("b", nb)):
            hook = files.made_by(node, f.path)
            if hook is not None:
                by_hook.setdefault(f.path, {})[side] = hook
    return NodeDiff(
        session=str(s.id),
        a=na,
        b=nb,
        common=common,
        only_a=lines(only_a),
        only_b=lines(only_b),
        files=differ,
        by_hook=by_hook,
    )
