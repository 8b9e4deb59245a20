"""The conversation tree of a session: nodes, parents and children, the head, labels, branches.

A node is created by a node event (user message, model response, tool result, compaction summary)
and named by that event's version (``"7"``). The projection keeps only structure (parent, kind,
depth) in flat arrays, so a 100k-node tree checkpoints and loads in milliseconds; message contents
stay in the events and are read back for the nodes a query needs (``path_events``).

A session forked from another (``Started.parent_session/parent_node``) sees the parent's path up to
``parent_node`` as its prefix: ``full_path`` walks into the parent's own tree, nothing is copied.
Inside one session the root is ``None``: nodes whose parent is ``None`` hang under it (in a forked
session, the root stands for the parent's node).

Labels and node references follow ``coder_es.domain.refs`` (one label names one node at a
time; ``HEAD``, node id, label, unique prefix): this projection is what every view reads them from.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from coder_es.application import CoderApp
from coder_es.domain.refs import resolve_ref
from coder_es.domain.session import ASSISTANT, SUMMARY, TOOL_RESULT, USER, NodeId, Session
from coder_es.errors import UnknownNodeError
from projections.checkpoint import Tracked, graph_state, load_graph_state

FORMAT = 1
KIND = "tree"

_KIND_CODE = {USER: "u", ASSISTANT: "a", TOOL_RESULT: "t", SUMMARY: "s"}
_CODE_KIND = {v: k for k, v in _KIND_CODE.items()}
_EVENT_KIND = {
    Session.UserMessageAdded: USER,
    Session.ModelResponded: ASSISTANT,
    Session.ToolCallCompleted: TOOL_RESULT,
    Session.ContextCompacted: SUMMARY,
}


@dataclass(frozen=True)
class NodeInfo:
    id: NodeId
    kind: str
    parent: NodeId | None
    depth: int
    children: tuple[NodeId, ...]
    labels: tuple[str, ...]


@dataclass(frozen=True)
class Branch:
    """A branch: the subtree that starts at ``start`` under ``fork_point``, and its newest leaf."""

    fork_point: NodeId | None
    start: NodeId
    tip: NodeId


@dataclass(frozen=True)
class NodeRef:
    """A node of some session (paths of forked sessions cross session boundaries)."""

    session: str
    node: NodeId


def node_kind(event: Any) -> str | None:
    """The tree kind of a node event, None for any other event."""
    for cls, kind in _EVENT_KIND.items():
        if isinstance(event, cls):
            return kind
    return None


def _is_id(ref: str) -> bool:
    """A node id as written: digits without a leading zero (``07`` is no id)."""
    return ref.isdigit() and ref[0] != "0"


def _num(node: NodeId | None) -> int:
    return 0 if node is None else int(node)


def _ref(num: int) -> NodeId | None:
    return None if num == 0 else str(num)


class ConversationTree:
    """A pure reducer over one session's events. Node numbers are versions; 0 is the root."""

    def __init__(self) -> None:
        self.position = 0
        self.session = ""
        self.parent_session: str | None = None
        self.parent_node: NodeId | None = None
        self.parent: dict[int, int] = {}
        self.kinds: dict[int, str] = {}
        self.depth: dict[int, int] = {0: 0}
        self.head = 0
        self.labels: dict[str, int] = {}
        self._children: dict[int, list[int]] | None = None

    # ------------------------------------------------------------------ reducing

    def apply(self, event: Any) -> None:
        version = int(event.originator_version)
        if version <= self.position:
            return  # already applied: catching up twice must not change anything
        self.position = version
        if isinstance(event, Session.NodeEvent):
            kind = node_kind(event)
            parent = _num(event.parent)
            self.parent[version] = parent
            self.kinds[version] = _KIND_CODE[kind or USER]
            self.depth[version] = self.depth[parent] + 1
            self.head = version
            if self._children is not None:
                self._children.setdefault(parent, []).append(version)
        elif isinstance(event, Session.HeadMoved):
            self.head = _num(event.node)
        elif isinstance(event, Session.NodeLabelled):
            # One label names one node: a re-used name moves (refs.label_positions, in place).
            self.labels.pop(event.name, None)
            self.labels[event.name] = int(event.node)
        elif isinstance(event, Session.Started):
            self.session = str(event.originator_id)
            self.parent_session = event.parent_session
            self.parent_node = event.parent_node

    def to_state(self) -> dict[str, Any]:
        state = graph_state(self)
        state["kinds"] = "".join(self.kinds[i] for i in state["ids"])
        state["head"] = self.head
        state["labels"] = [[name, node] for name, node in self.labels.items()]
        return state

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> ConversationTree:
        tree = cls()
        ids = load_graph_state(tree, state)
        tree.kinds = dict(zip(ids, state["kinds"], strict=True))
        tree.head = int(state["head"])
        tree.labels = {name: int(node) for name, node in state["labels"]}
        return tree

    # ------------------------------------------------------------------ structure

    def _kids(self) -> dict[int, list[int]]:
        # Built on first use only: opening a tree to answer "where is the head" needs no index.
        if self._children is None:
            kids: dict[int, list[int]] = {}
            for node, parent in self.parent.items():
                kids.setdefault(parent, []).append(node)
            self._children = kids
        return self._children

    def _require(self, node: NodeId | None) -> int:
        num = _num(node)
        if num != 0 and num not in self.parent:
            raise UnknownNodeError(self.session, str(node))
        return num

    def has(self, node: NodeId) -> bool:
        return _is_id(node) and int(node) in self.parent

    def __len__(self) -> int:
        return len(self.parent)

    @property
    def head_node(self) -> NodeId | None:
        return _ref(self.head)

    def nodes(self) -> list[NodeId]:
        return [str(n) for n in self.parent]

    def kind(self, node: NodeId) -> str:
        return _CODE_KIND[self.kinds[self._require(node)]]

    def parent_of(self, node: NodeId) -> NodeId | None:
        return _ref(self.parent[self._require(node)])

    def children(self, node: NodeId | None) -> list[NodeId]:
        return [str(n) for n in self._kids().get(self._require(node), [])]

    def labels_of(self, node: NodeId) -> list[str]:
        num = self._require(node)
        return [name for name, n in self.labels.items() if n == num]

    def labels_by_node(self) -> dict[NodeId, list[str]]:
        """``labels_of`` of every labelled node, in one pass over the labels (a tree printed
        whole asks for each node's labels)."""
        out: dict[NodeId, list[str]] = {}
        for name, n in self.labels.items():
            out.setdefault(str(n), []).append(name)
        return out

    def info(self, node: NodeId) -> NodeInfo:
        num = self._require(node)
        return NodeInfo(
            id=str(num),
            kind=_CODE_KIND[self.kinds[num]],
            parent=_ref(self.parent[num]),
            depth=self.depth[num],
            children=tuple(self.children(node)),
            labels=tuple(self.labels_of(node)),
        )

    def resolve(self, ref: str) -> NodeId:
        """``HEAD``, a node id, a label, or a unique prefix of a node id (``resolve_ref``)."""
        if self.has(ref):
            return ref
        return resolve_ref(
            ref,
            session=self.session,
            nodes=_NodeIds(self.parent),
            labels={name: str(n) for name, n in self.labels.items()},
            head=self.head_node,
        )

    # ------------------------------------------------------------------ queries

    def path(self, node: NodeId | None) -> list[NodeId]:
        """The nodes from the first one under the root down to ``node`` (inclusive)."""
        num = self._require(node)
        out: list[int] = []
        while num:
            out.append(num)
            num = self.parent[num]
        return [str(n) for n in reversed(out)]

    def siblings(self, node: NodeId) -> list[NodeId]:
        """The other children of the node's parent (alternatives to this turn), oldest first."""
        parent = self.parent[self._require(node)]
        return [str(n) for n in self._kids().get(parent, []) if str(n) != node]

    def leaves(self) -> list[NodeId]:
        kids = self._kids()
        return [str(n) for n in self.parent if n not in kids]

    def branch_points(self) -> list[NodeId | None]:
        """Nodes (``None``: the root) with more than one child."""
        return [_ref(n) for n, k in sorted(self._kids().items()) if len(k) > 1]

    def branches(self) -> list[Branch]:
        """Every branch (a child of a branch point, or the main line) with its newest leaf."""
        kids = self._kids()
        newest = self._newest_leaf_below()
        starts: list[tuple[int, int]] = []
        for parent, children in sorted(kids.items()):
            if len(children) > 1 or parent == 0:
                starts.extend((parent, child) for child in children)
        return [Branch(_ref(fp), str(s), str(newest[s])) for fp, s in starts]

    def _newest_leaf_below(self) -> dict[int, int]:
        """For every node, the most recently created leaf of its subtree (iterative, any depth)."""
        kids = self._kids()
        newest: dict[int, int] = {}
        # Children have larger versions than their parents: walking versions downwards visits
        # every child before its parent.
        for node in sorted(self.parent, reverse=True):
            below = kids.get(node)
            newest[node] = max(newest[c] for c in below) if below else node
        return newest

    def is_ancestor(self, ancestor: NodeId | None, node: NodeId | None) -> bool:
        """True when ``ancestor`` is on the path root->``node`` (a node is its own ancestor)."""
        a, n = self._require(ancestor), self._require(node)
        while self.depth[n] > self.depth[a]:
            n = self.parent[n]
        return n == a

    def common_ancestor(self, a: NodeId | None, b: NodeId | None) -> NodeId | None:
        x, y = self._require(a), self._require(b)
        return _ref(self._lca(x, y))

    def _lca(self, x: int, y: int) -> int:
        while self.depth[x] > self.depth[y]:
            x = self.parent[x]
        while self.depth[y] > self.depth[x]:
            y = self.parent[y]
        while x != y:
            x, y = self.parent[x], self.parent[y]
        return x

    def diverging(
        self, a: NodeId | None, b: NodeId | None
    ) -> tuple[NodeId | None, list[NodeId], list[NodeId]]:
        """(common ancestor, nodes only on a's path, nodes only on b's path), each root-first."""
        x, y = self._require(a), self._require(b)
        lca = self._lca(x, y)
        return _ref(lca), self._down_from(lca, x), self._down_from(lca, y)

    def _down_from(self, ancestor: int, node: int) -> list[NodeId]:
        out: list[int] = []
        while node != ancestor:
            out.append(node)
            node = self.parent[node]
        return [str(n) for n in reversed(out)]


class _NodeIds(Collection[NodeId]):
    """The tree's node ids as strings, without building a list for a membership test."""

    def __init__(self, parent: dict[int, int]) -> None:
        self._parent = parent

    def __contains__(self, ref: object) -> bool:
        return isinstance(ref, str) and _is_id(ref) and int(ref) in self._parent

    def __iter__(self) -> Iterator[NodeId]:
        return (str(n) for n in self._parent)

    def __len__(self) -> int:
        return len(self._parent)


# ---------------------------------------------------------------------- opening


def track_tree(app: CoderApp, session_id: UUID, *, every: int = 1000) -> Tracked[ConversationTree]:
    """The session's tree, from its checkpoint plus the events after it (call ``catch_up``)."""
    return Tracked(
        app,
        session_id,
        kind=KIND,
        fmt=FORMAT,
        new=ConversationTree,
        load=ConversationTree.from_state,
        every=every,
    )


def open_tree(app: CoderApp, session_id: UUID) -> ConversationTree:
    return track_tree(app, session_id).open()


def full_path(app: CoderApp, tree: ConversationTree, node: NodeId | None) -> list[NodeRef]:
    """The path root->node across forks: the parent session's prefix first."""
    refs: list[NodeRef] = []
    if tree.parent_session is not None:
        parent = open_tree(app, UUID(tree.parent_session))
        refs = full_path(app, parent, tree.parent_node)
    refs.extend(NodeRef(tree.session, n) for n in tree.path(node))
    return refs


def path_events(app: CoderApp, tree: ConversationTree, node: NodeId | None) -> list[Any]:
    """The node events on the path root->node (forks included), in conversation order."""
    by_session: dict[str, list[int]] = {}
    order = full_path(app, tree, node)
    for ref in order:
        by_session.setdefault(ref.session, []).append(int(ref.node))
    found: dict[tuple[str, int], Any] = {}
    for session, versions in by_session.items():
        for event in events_at(app, UUID(session), versions):
            found[(session, event.originator_version)] = event
    return [found[(ref.session, int(ref.node))] for ref in order]


def events_at(app: CoderApp, session_id: UUID, versions: list[int]) -> list[Any]:
    wanted = set(versions)
    if len(versions) <= 32:
        # A short path: one ranged read per node beats scanning a long session.
        out: list[Any] = []
        for v in versions:
            out.extend(app.events.get(session_id, gt=v - 1, lte=v))
        return out
    low, high = min(versions), max(versions)
    # Only the wanted events are decoded: decoding is most of the cost of reading a long
    # session, and about half of a session's events are not nodes.
    decode = app.mapper.to_domain_event
    return [
        decode(stored)
        for stored in app.recorder.select_events(session_id, gt=low - 1, lte=high)
        if stored.originator_version in wanted
    ]
