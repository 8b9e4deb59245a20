"""The file state at every node: for each path the session touched, its content hash (None: absent).

Each node carries the paths whose content is known *at that node*; the state at a node is, for every
path, the entry of the nearest node on the path root->node that has one (the root, node 0, holds
the state before the first node). Entries come from:

- changes: an ``EditApplied`` result (attached to the next node, the tool result it belongs to) or a
  ``ToolCallCompleted.files_changed`` ``after`` (attached to that node);
- observations: what the disk held when the session looked (``FileObserved``, the ``disk`` side of
  an ``EditApplied``, the ``before`` of a shell change). An observation that disagrees with the
  state at the head is a change made outside the session (a user's edit): it is recorded at the
  first node on the head's path after the last one that knew the file (the edit happened some time
  since), so it belongs to the states *before* the agent's change that observed it, and rewinding
  that change brings back the user's version rather than the agent's older one. The first sight of
  a path is recorded at the root: nothing in the session had touched it, so as far as the session
  knows it was like that from the start.

A node's entry is only ever set by what the session recorded or observed while its head was on
that node's path; moving the head never redefines a node.

``known`` is what the session last knew the disk held for each path (what tells whether a
restoration must touch the path); ``dirty`` lists the paths where that differs from the state at
the head (a restoration left a conflict or merged a user's edit, or the head moved without the
files). ``bases`` holds, for paths whose disk content is the user's own and belongs to no node (a
restoration left it in conflict, or the user edited a file that did not hold the head's state),
the content that user content was made from: the next restoration merges from it rather than from
``known``, so the user's edits are merged again (or reported again) instead of taken for the
session's. An entry goes when the session writes the file or records it at a node.

Forked sessions (``Started.parent_session``) inherit the parent's state at ``parent_node`` for paths
they have not touched themselves: ``inherit`` is a lookup the opener sets, never stored, and the
reducer's own decisions use local knowledge only, so rebuilding gives the same state whatever the
parent did since.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol
from uuid import UUID

from coder_es.application import CoderApp
from coder_es.domain.session import NodeId, Session
from coder_es.errors import UnknownNodeError
from projections.checkpoint import Tracked, graph_state, load_graph_state

FORMAT = 2
KIND = "files"


class _Missing:
    """The session knows nothing about a path at a node."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
Hash = str | None


@dataclass(frozen=True)
class FileDiff:
    path: str
    a: Hash
    b: Hash

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "a": self.a, "b": self.b}


class ParentView(Protocol):
    """What a forked session sees of its parent: the parent's state at the fork node."""

    def value(self, path: str) -> Any: ...

    def state(self) -> dict[str, Hash]: ...


def _num(node: NodeId | None) -> int:
    return 0 if node is None else int(node)


class FileStates:
    """A pure reducer over one session's events (plus ``inherit`` for forked sessions)."""

    def __init__(self) -> None:
        self.position = 0
        self.session = ""
        self.parent_session: str | None = None
        self.parent_node: NodeId | None = None
        self.parent: dict[int, int] = {}
        self.depth: dict[int, int] = {0: 0}
        self.entries: dict[int, dict[str, Hash]] = {}
        self.head = 0
        self.pending: dict[str, Hash] = {}
        self.known: dict[str, Hash] = {}
        self.dirty: set[str] = set()
        self.bases: dict[str, Hash] = {}
        self.inherit: ParentView | None = None

    # ------------------------------------------------------------------ reducing

    def apply(self, event: Any) -> None:
        version = int(event.originator_version)
        if version <= self.position:
            return
        self.position = version
        if isinstance(event, Session.NodeEvent):
            self._new_node(version, _num(event.parent), event)
        elif isinstance(event, Session.EditApplied):
            self._observe(event.path, event.disk)
            self.pending[event.path] = event.result
            self.bases.pop(event.path, None)  # the session wrote it: the result is its own
            self._knew(event.path, event.result, clean=True)
        elif isinstance(event, Session.FileObserved):
            self._observe(event.path, event.hash)
            self._knew(event.path, event.hash, clean=event.hash == self._local_current(event.path))
        elif isinstance(event, Session.HeadMoved):
            self._move_head(_num(event.node))
        elif isinstance(event, Session.WorkspaceRestored):
            # Recorded before the head moves: the disk side is what the disk held at the old head.
            for entry in event.entries:
                path = entry["path"]
                if entry["outcome"] == "error":
                    # Nothing is known of what the disk holds: the next restoration looks again.
                    if path in self.known:
                        self.dirty.add(path)
                    continue
                self._restored(path, entry)
        elif isinstance(event, Session.Started):
            self.session = str(event.originator_id)
            self.parent_session = event.parent_session
            self.parent_node = event.parent_node

    def _restored(self, path: str, entry: dict[str, Any]) -> None:
        result, target = entry["result"], entry["target"]
        if entry["outcome"] == "conflict":
            # Left unmerged, as the user has it: the user's content is no node's state, and the
            # next restoration merges from the same base, so the user's resolution is merged.
            self.bases.setdefault(path, entry["base"])
        else:
            self._observe(path, entry["disk"])
            if result == target:
                self.bases.pop(path, None)
            elif path in self.bases:
                # The user's own content, now merged onto the target: carried on top of it.
                self.bases[path] = target
        self._knew(path, result, clean=result == self._local_current(path))

    def _new_node(self, node: int, parent: int, event: Any) -> None:
        if parent != self.head:
            self._flush_pending()
        shell_changes = getattr(event, "files_changed", None) or []
        for change in shell_changes:
            if change["path"] not in self.pending:
                # The shell's ``before`` is what the disk held before the command ran, at the
                # parent (still the head here).
                self._overwritten(change["path"], change.get("before"))
        self.parent[node] = parent
        self.depth[node] = self.depth[parent] + 1
        changes = dict(self.pending) if parent == self.head else {}
        self.pending = {}
        for path in sorted(self.dirty):
            # The disk did not hold the head's state for these (files restored without the
            # conversation, or a conflict): the new node starts from what the disk held.
            changes.setdefault(path, self.known[path])
            self.bases.pop(path, None)
        self.dirty.clear()
        for change in shell_changes:
            changes[change["path"]] = change.get("after")
            self.known[change["path"]] = change.get("after")
            self.bases.pop(change["path"], None)
        if changes:
            self.entries[node] = changes
        self.head = node

    def _overwritten(self, path: str, before: Hash) -> None:
        """A shell command replaced ``before``: the user's own content in it must stay somewhere.

        Content that is the user's alone (no node holds it) was on disk at the head and nowhere
        else: the head records it, the one case where a node's entry changes after it was made,
        because the command just destroyed the only copy a move could bring back.
        """
        if path in self.bases or (path in self.dirty and self.known.get(path) != before):
            self.entries.setdefault(self.head, {})[path] = before
            self.known[path] = before
            self.bases.pop(path, None)
            return
        self._observe(path, before)

    def _observe(self, path: str, value: Hash) -> None:
        """The disk held ``value`` at the head: record it if that is news (an outside edit).

        An edit made on a file that did not hold the head's state was made on no node's state:
        it stays the user's own (merged from ``bases``) until a node records it.
        """
        if path not in self.known:
            # First sight: nothing in the session touched it so far, so as far as the session
            # knows it was like this from the start.
            self.entries.setdefault(0, {})[path] = value
            return
        if self.known[path] == value:
            return
        if path in self.pending:
            self.pending[path] = value  # changed again during the same step
            return
        if path in self.dirty or path in self.bases:
            self.bases.setdefault(path, self.known[path])
            return
        self.entries.setdefault(self._since_last_seen(path), {})[path] = value

    def _since_last_seen(self, path: str) -> int:
        """The first node on the head's path after the last one that knew ``path``.

        An outside edit happened some time after the session last knew the file: every node
        since then is, as far as the session can tell, a state in which the disk held that edit.
        """
        node, below = self.head, self.head
        while node != 0:
            changes = self.entries.get(node)
            if changes is not None and path in changes:
                return below
            below, node = node, self.parent[node]
        return below

    def _knew(self, path: str, value: Hash, *, clean: bool) -> None:
        self.known[path] = value
        if clean:
            # The disk holds the head's state: nothing on it is the user's alone any more.
            self.dirty.discard(path)
            self.bases.pop(path, None)
        else:
            self.dirty.add(path)

    def _flush_pending(self) -> None:
        # Edits made at the head and never attached to a node: the disk holds them at the head.
        if self.pending:
            self.entries.setdefault(self.head, {}).update(self.pending)
            self.pending = {}

    def _move_head(self, new: int) -> None:
        self._flush_pending()
        old = self.head
        changed = self._changed_between(old, new)
        old_values, new_values = self._local_values(old, changed), self._local_values(new, changed)
        for path in changed:
            old_value = old_values.get(path, MISSING)
            new_value = new_values.get(path, MISSING)
            if path not in self.known and old_value is not MISSING:
                self.known[path] = old_value
            if path in self.known and new_value is not MISSING and self.known[path] != new_value:
                self.dirty.add(path)
            else:
                self.dirty.discard(path)
                self.bases.pop(path, None)
        self.head = new

    def to_state(self) -> dict[str, Any]:
        return {
            **graph_state(self),
            "entries": [
                [node, sorted(self.entries[node].items())] for node in sorted(self.entries)
            ],
            "head": self.head,
            "pending": sorted(self.pending.items()),
            "known": sorted(self.known.items()),
            "dirty": sorted(self.dirty),
            "bases": sorted(self.bases.items()),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> FileStates:
        fs = cls()
        load_graph_state(fs, state)
        fs.entries = {int(node): dict(items) for node, items in state["entries"]}
        fs.head = int(state["head"])
        fs.pending = dict(state["pending"])
        fs.known = dict(state["known"])
        fs.dirty = set(state["dirty"])
        fs.bases = dict(state["bases"])
        return fs

    # ------------------------------------------------------------------ lookups

    def _require(self, node: NodeId | None) -> int:
        num = _num(node)
        if num != 0 and num not in self.parent:
            raise UnknownNodeError(self.session, str(node))
        return num

    def _local_current(self, path: str) -> Any:
        if path in self.pending:
            return self.pending[path]
        return self._local_value(self.head, path)

    def _local_value(self, node: int, path: str) -> Any:
        """The entry of the nearest node on root->node that has ``path``, else MISSING."""
        while True:
            changes = self.entries.get(node)
            if changes is not None and path in changes:
                return changes[path]
            if node == 0:
                return MISSING
            node = self.parent[node]

    def _local_values(self, node: int, paths: Iterable[str]) -> dict[str, Hash]:
        """``_local_value`` of many paths in one walk up the tree (paths never touched on
        root->node are left out): the cost follows the depth plus the paths, not their product."""
        remaining = set(paths)
        found: dict[str, Hash] = {}
        while remaining:
            changes = self.entries.get(node)
            if changes:
                hits = (
                    [p for p in changes if p in remaining]
                    if len(changes) < len(remaining)
                    else [p for p in remaining if p in changes]
                )
                for path in hits:
                    found[path] = changes[path]
                remaining.difference_update(hits)
            if node == 0:
                break
            node = self.parent[node]
        return found

    def _values(self, node: int, paths: Iterable[str]) -> dict[str, Any]:
        """``_value`` of each of ``paths`` (MISSING: never touched), in one walk."""
        paths = list(paths)
        found: dict[str, Any] = self._local_values(node, paths)
        for path in paths:
            if path not in found:
                found[path] = MISSING if self.inherit is None else self.inherit.value(path)
        return found

    def _value(self, node: int, path: str) -> Any:
        value = self._local_value(node, path)
        if value is MISSING and self.inherit is not None:
            return self.inherit.value(path)
        return value

    def value_at(self, node: NodeId | None, path: str) -> Any:
        """The content hash of ``path`` at ``node`` (None: absent; MISSING: never touched)."""
        return self._value(self._require(node), path)

    def current(self, path: str) -> Any:
        """The state at the head, including edits not yet attached to a node."""
        if path in self.pending:
            return self.pending[path]
        return self._value(self.head, path)

    def state_at(self, node: NodeId | None) -> dict[str, Hash]:
        """Every path the session (or the session it forked from) touched, at ``node``."""
        num = self._require(node)
        state: dict[str, Hash] = {}
        while True:
            for path, value in self.entries.get(num, {}).items():
                state.setdefault(path, value)
            if num == 0:
                break
            num = self.parent[num]
        if self.inherit is not None:
            for path, value in self.inherit.state().items():
                state.setdefault(path, value)
        return dict(sorted(state.items()))

    def current_state(self) -> dict[str, Hash]:
        state = self.state_at(str(self.head) if self.head else None)
        state.update(self.pending)
        return dict(sorted(state.items()))

    def changed_at(self, node: NodeId) -> list[str]:
        """Paths with an entry at this node (changed by it, or observed changed there)."""
        return sorted(self.entries.get(self._require(node), {}))

    def _lca(self, x: int, y: int) -> int:
        while self.depth[x] > self.depth[y]:
            x = self.parent[x]
        while self.depth[y] > self.depth[x]:
            y = self.parent[y]
        while x != y:
            x, y = self.parent[x], self.parent[y]
        return x

    def _changed_between(self, a: int, b: int) -> list[str]:
        """Paths with an entry strictly below the common ancestor on either side."""
        lca = self._lca(a, b)
        seen: dict[str, None] = {}
        for start in (a, b):
            node = start
            while node != lca:
                for path in self.entries.get(node, ()):
                    seen.setdefault(path)
                node = self.parent[node]
        return list(seen)

    def diff(self, a: NodeId | None, b: NodeId | None) -> list[FileDiff]:
        """Paths whose content differs between two nodes; cost grows with the nodes between."""
        x, y = self._require(a), self._require(b)
        changed = sorted(self._changed_between(x, y))
        values_a, values_b = self._values(x, changed), self._values(y, changed)
        out = []
        for path in changed:
            va, vb = values_a[path], values_b[path]
            if va != vb and va is not MISSING and vb is not MISSING:
                out.append(FileDiff(path, va, vb))
        return out

    def restore_plan(self, target: NodeId | None) -> list[tuple[str, Hash, Hash]]:
        """(path, base, target) for every path the disk must change to reach ``target``'s state.

        A path is restored when the target's content differs from what the session last knew
        the disk held; base is what the user's content on disk was made from (``bases``), else
        that known content. Only paths that can differ are looked at: those changed between the
        head and the target, those left dirty or holding the user's content, and pending edits.
        """
        num = self._require(target)
        candidates: dict[str, None] = dict.fromkeys(self._changed_between(self.head, num))
        candidates.update(dict.fromkeys(sorted(self.dirty)))
        candidates.update(dict.fromkeys(sorted(self.bases)))
        candidates.update(dict.fromkeys(self.pending))
        plan = []
        wants = self._values(num, candidates)
        for path in candidates:
            want = wants[path]
            if want is MISSING:
                continue  # never touched on the way to the target: leave it as it is
            disk = self.known[path] if path in self.known else self.current(path)
            if disk is MISSING or disk != want:
                base = self.bases.get(path, disk)
                plan.append((path, None if base is MISSING else base, want))
        return sorted(plan)


# ---------------------------------------------------------------------- opening


class _Inherited:
    """The parent session's state at the fork node, looked up lazily."""

    def __init__(self, app: CoderApp, session: str, node: NodeId | None) -> None:
        self._app, self._session, self._node = app, session, node
        self._files: FileStates | None = None

    def _states(self) -> FileStates:
        if self._files is None:
            self._files = open_files(self._app, UUID(self._session))
        return self._files

    def value(self, path: str) -> Any:
        return self._states().value_at(self._node, path)

    def state(self) -> dict[str, Hash]:
        return self._states().state_at(self._node)


def track_files(app: CoderApp, session_id: UUID, *, every: int = 1000) -> Tracked[FileStates]:
    return Tracked(
        app,
        session_id,
        kind=KIND,
        fmt=FORMAT,
        new=FileStates,
        load=FileStates.from_state,
        every=every,
        prepare=lambda files: connect_parent(app, files),
    )


def connect_parent(app: CoderApp, files: FileStates) -> None:
    """Give a forked session's projection its view of the parent session."""
    if files.parent_session is not None and files.inherit is None:
        files.inherit = _Inherited(app, files.parent_session, files.parent_node)


def open_files(app: CoderApp, session_id: UUID) -> FileStates:
    return track_files(app, session_id).open()


def paths_of(diffs: Iterable[FileDiff]) -> list[str]:
    return [d.path for d in diffs]
