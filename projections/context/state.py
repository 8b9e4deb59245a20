"""The incremental state behind the context: conversation nodes, and the path to one head as units.

``ContextState.apply(event)`` folds each session event once (O(size of the event)). What the
context builder reads is a ``PathView``: the path root -> head cut into *units*, the pieces the
builder keeps or drops whole:

- ``user``: a user message;
- ``step``: a model response with the results of its tool calls (the tool_use / tool_result
  pairing lives inside one unit, so dropping or keeping units can never split a pair);
- ``results``: tool results whose call is not in the unit before them (their model response was
  compacted away, or the path is odd); they are sent as plain text;
- ``summary``: the text of a ``ContextCompacted`` node, placed where the first node it covers
  was. Covered nodes are left out; a summary covered by a later one is left out too, and so,
  transitively, is everything it covered.

Also kept per view: the files the path's tool calls read or changed, least recently used first
(``FileObserved`` / ``EditApplied`` events are tied to the result of the call that caused them
by ``tool_use_id``; a result's ``files_changed`` counts too).

The view of the last head asked for is cached. When the next head descends from it (one more
response, a few more tool results) only the new nodes are added: building the context at the
head of a long session costs the size of what is sent, not the length of the path. A head
elsewhere (checkout, fork) or a new summary on the path rebuilds the view once, O(path).
A view depends only on the nodes on its path, which never change once recorded, so the cache
can never be stale and a cached view equals a rebuilt one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from coder_es.domain.session import ASSISTANT, SUMMARY, TOOL_RESULT, USER, NodeId, Session
from coder_es.errors import UnknownNodeError


@dataclass(slots=True)
class CNode:
    """One conversation node, as the context needs it."""

    num: int
    parent: int  # 0: the root
    depth: int  # 1 for a node under the root
    kind: str
    blocks: list[dict[str, Any]] = field(default_factory=list)  # user / assistant content
    tool_uses: tuple[str, ...] = ()  # assistant: ids of its tool_use blocks
    tool_use_id: str = ""  # tool result
    name: str = ""  # tool result: the tool
    output: str = ""
    output_blob: str | None = None
    is_error: bool = False
    # Tool result: (path, content hash or None, seen by a read) in the order they happened.
    files: tuple[tuple[str, str | None, bool], ...] = ()
    changed: tuple[str, ...] = ()  # tool result: paths it changed
    summary: str = ""
    covers: tuple[int, ...] = ()
    produced_by: str = ""
    # A node inherited from the session this one was forked from: "<session>:<node>" (its own
    # number is negative, see ``ContextState.inherit``). Empty for the session's own nodes.
    label: str = ""

    @property
    def ref(self) -> str:
        """How the node is named in text the model reads."""
        return self.label or str(self.num)


@dataclass(eq=False, slots=True)
class Unit:
    kind: str  # "user" | "step" | "results" | "summary"
    nodes: list[int]
    pending: set[str] = field(default_factory=set)  # step: tool calls still without a result
    # Renderings by (level, keep_thinking, counter, node count); see builder.render_unit.
    renders: dict[Any, Any] = field(default_factory=dict)
    digest: list[str] | None = None  # fallback-summary lines (summarize.unit_lines)


@dataclass
class PathView:
    head: int
    path: list[int]
    units: list[Unit]
    # path -> (hash, result node, seen by a read); iteration order: least recently used first.
    files: dict[str, tuple[str | None, int, bool]]
    covered: set[int]


def _num(node: NodeId | None) -> int:
    return 0 if node is None else int(node)


_MISSING: Any = object()


class ContextState:
    """A pure reducer over one session's events (apply each event once, in order)."""

    def __init__(self) -> None:
        self.position = 0
        self.session = ""
        self.workspace = ""
        self.agent = ""
        self.model = ""
        self.settings: dict[str, Any] = {}
        self.head: NodeId | None = None
        self.nodes: dict[int, CNode] = {}
        self.root = 0  # the node this session's first nodes hang under (see ``inherit``)
        self._pending_files: dict[str, list[tuple[str, str | None, bool]]] = {}
        self._view: PathView | None = None
        self.full_rebuilds = 0

    @classmethod
    def from_events(cls, events: Iterable[Any]) -> ContextState:
        state = cls()
        for event in events:
            state.apply(event)
        return state

    def inherit(self, parent: ContextState, at: NodeId | None) -> None:
        """Start from the conversation of the session this one was forked from, up to its node
        ``at``. The nodes on that path are copied in as nodes -n..-1 (a session's own nodes are
        its event versions, from 1, so the two never collide) and named "<session>:<node>" in
        what the model reads; this session's first nodes hang under the last of them. A fork of
        a fork works the same way, as ``parent`` holds its own inherited prefix. Call before
        applying any of this session's events."""
        if self.nodes or self.position:
            msg = "inherit() must come before the session's own events"
            raise ValueError(msg)
        path = parent._path(parent.require(at))
        renumbered = {old: i - len(path) for i, old in enumerate(path)}
        short = parent.session[:8]
        for old in path:
            node = parent.nodes[old]
            new = renumbered[old]
            self.nodes[new] = replace(
                node,
                num=new,
                parent=renumbered.get(node.parent, 0),
                covers=tuple(renumbered[c] for c in node.covers if c in renumbered),
                label=node.label or f"{short}:{old}",
            )
        self.root = renumbered[path[-1]] if path else 0

    # ------------------------------------------------------------------ folding

    def apply(self, event: Any) -> None:
        version = int(event.originator_version)
        if version <= self.position:
            return  # already applied: a save and a reload may deliver the same event
        self.position = version
        kind = type(event)
        if kind is Session.UserMessageAdded:
            self._node(event, USER, blocks=list(event.content))
        elif kind is Session.ModelResponded:
            blocks = list(event.blocks)
            uses = tuple(str(b.get("id", "")) for b in blocks if b.get("type") == "tool_use")
            self._node(event, ASSISTANT, blocks=blocks, tool_uses=uses)
        elif kind is Session.ToolCallCompleted:
            files = self._pending_files.pop(event.tool_use_id, [])
            changed: list[str] = []
            for change in event.files_changed:
                path = str(change.get("path", ""))
                if path:
                    changed.append(path)
                    files.append((path, change.get("after"), False))
            for path, _hash, by_read in files:
                if not by_read and path not in changed:
                    changed.append(path)
            self._node(
                event,
                TOOL_RESULT,
                tool_use_id=event.tool_use_id,
                name=event.name,
                output=event.output,
                output_blob=event.output_blob,
                is_error=bool(event.is_error),
                files=tuple(files),
                changed=tuple(changed),
            )
        elif kind is Session.ContextCompacted:
            covers = tuple(int(c) for c in event.covers if str(c).isdigit())
            self._node(
                event,
                SUMMARY,
                summary=event.summary,
                covers=covers,
                produced_by=event.produced_by,
            )
        elif kind is Session.FileObserved:
            if event.tool_use_id is not None:
                entry = (event.path, event.hash, True)
                self._pending_files.setdefault(event.tool_use_id, []).append(entry)
        elif kind is Session.EditApplied:
            if event.tool_use_id is not None:
                entry = (event.path, event.result, False)
                self._pending_files.setdefault(event.tool_use_id, []).append(entry)
        elif kind is Session.HeadMoved:
            self.head = event.node
        elif kind is Session.Started:
            self.session = str(event.originator_id)
            self.workspace = event.workspace
            self.agent = event.agent
            self.model = event.model
            self.settings = dict(event.settings)

    def _node(self, event: Any, kind: str, **fields: Any) -> None:
        num = int(event.originator_version)
        parent = _num(event.parent) or self.root
        pnode = self.nodes.get(parent)
        depth = pnode.depth + 1 if pnode is not None else 1
        self.nodes[num] = CNode(num, parent if pnode is not None else 0, depth, kind, **fields)
        self.head = str(num)

    # ------------------------------------------------------------------ views

    def require(self, head: NodeId | None) -> int:
        """The number of node ``head`` of this session (None: the root, which in a forked
        session is the inherited node it was forked at)."""
        if head is None:
            return self.root
        num = int(head) if str(head).isdigit() else 0
        if num not in self.nodes:
            raise UnknownNodeError(self.session, str(head))
        return num

    def view(self, head: NodeId | None) -> PathView:
        """The units on the path root -> ``head`` (cached; see the module docstring)."""
        num = self.require(head)
        cached = self._view
        if cached is not None:
            if cached.head == num:
                return cached
            new = self._descent(cached.head, num)
            if new is not None and all(self.nodes[n].kind != SUMMARY for n in new):
                for n in new:
                    self._extend(cached, n)
                cached.head = num
                return cached
        self._view = self._rebuild(num)
        return self._view

    def _descent(self, ancestor: int, node: int) -> list[int] | None:
        """The nodes below ``ancestor`` down to ``node`` (root-first), None if not below it."""
        stop = self.nodes[ancestor].depth if ancestor else 0
        out: list[int] = []
        cur = node
        while cur and self.nodes[cur].depth > stop:
            out.append(cur)
            cur = self.nodes[cur].parent
        if cur != ancestor:
            return None
        out.reverse()
        return out

    def _rebuild(self, head: int) -> PathView:
        self.full_rebuilds += 1
        path = self._path(head)
        pos = {n: i for i, n in enumerate(path)}
        covered: set[int] = set()
        anchors: dict[int, int] = {}
        for i, n in enumerate(path):
            node = self.nodes[n]
            if node.kind != SUMMARY:
                continue
            anchor = i
            for c in node.covers:
                at = pos.get(c)
                if at is not None and at < i:  # only ancestors can be covered
                    covered.add(c)
                    anchor = min(anchor, anchors.get(c, at))
            anchors[n] = anchor
        placed = sorted((anchor, pos[s]) for s, anchor in anchors.items() if s not in covered)
        view = PathView(head, path, [], {}, covered)
        k = 0
        for i, n in enumerate(path):
            while k < len(placed) and placed[k][0] <= i:
                view.units.append(Unit("summary", [path[placed[k][1]]]))
                k += 1
            node = self.nodes[n]
            self._note_files(view, node)
            if n not in covered and node.kind != SUMMARY:
                self._add_unit(view, node)
        for _, at in placed[k:]:
            view.units.append(Unit("summary", [path[at]]))
        return view

    def _path(self, head: int) -> list[int]:
        """The node numbers root -> ``head``."""
        path: list[int] = []
        cur = head
        while cur:
            path.append(cur)
            cur = self.nodes[cur].parent
        path.reverse()
        return path

    def _extend(self, view: PathView, num: int) -> None:
        node = self.nodes[num]
        view.path.append(num)
        self._note_files(view, node)
        self._add_unit(view, node)

    @staticmethod
    def _note_files(view: PathView, node: CNode) -> None:
        for path, digest, by_read in node.files:
            view.files.pop(path, None)
            view.files[path] = (digest, node.num, by_read)

    @staticmethod
    def _add_unit(view: PathView, node: CNode) -> None:
        units = view.units
        if node.kind == USER:
            units.append(Unit("user", [node.num]))
        elif node.kind == ASSISTANT:
            units.append(Unit("step", [node.num], pending=set(node.tool_uses)))
        elif node.kind == TOOL_RESULT:
            last = units[-1] if units else None
            if last is not None and last.kind == "step" and node.tool_use_id in last.pending:
                last.pending.discard(node.tool_use_id)
                last.nodes.append(node.num)
                last.renders.clear()
                last.digest = None
            elif last is not None and last.kind == "results":
                last.nodes.append(node.num)
                last.renders.clear()
                last.digest = None
            else:
                units.append(Unit("results", [node.num]))


SessionEvents = Callable[[str, int], Sequence[Any]]
"""A session's events by id, up to a version."""


def forked_from(started: Any, session_events: SessionEvents) -> ContextState:
    """A context state to fold a session's events into: empty, or, for a session forked from
    another (``Started.parent_session/parent_node``), holding that session's conversation up to
    the fork (and so on up a chain of forks). Only the forked-from session's events up to the
    fork are read (its Started event alone for a fork before its first node); one the store does
    not have (a cassette recorded before cassettes carried
    ancestors) contributes nothing."""
    state = ContextState()
    parent = getattr(started, "parent_session", None)
    if parent:
        node = started.parent_node
        events = session_events(str(parent), 1 if node is None else int(node))
        if events:
            state.inherit(session_context(events, session_events), started.parent_node)
    return state


def session_context(events: Sequence[Any], session_events: SessionEvents) -> ContextState:
    """The context state of a session's ``events``, forked-from conversation included."""
    state = forked_from(events[0] if events else None, session_events)
    for event in events:
        state.apply(event)
    return state
