"""The file state at every node: for each path the session touched, its content hash (None: absent).

Each node carries the paths whose content the session made *at that node*; the state at a node is,
for every path, the entry of the nearest node on the path root->node that has one (the root, node
0, holds the state before the first node). Authorship is explicit: an entry is always the
session's own content (an agent's edit or write, a command's result, a restoration of the
session's own content) except at the root, where the first sight of a path records what the
user's disk held when the session first looked (``from_disk``: its author is the user). Entries
come from:

- an ``EditApplied``: the agent's own content (``proposed``, not the merge result, which may hold
  the user's concurrent bytes), attached to the next node (the tool result it belongs to);
- a ``ToolCallCompleted.files_changed`` change: the command's own version (``proposed`` for a
  change merged with a concurrent edit, else ``after``), at that node; a conflict changes nothing;
- a ``HookRan`` outside a tool call (``Stop``, ``UserPromptSubmit``, ``SessionStart``...) whose
  command changed files (``effect.files_changed``, merged like a command's): the hook's own
  version, at the head (the node the hook ran after), or, before the first node, at the next
  node; ``by_hook`` names the hook per node and path, as a hook's change inside a call
  (``files_changed`` with ``by``) is named;
- the first sight of a path (``FileObserved``, the ``disk`` side of an edit, the ``before`` of a
  command's change): at the root.

Seeing a user's edit later never makes it a node's state: a user's change becomes the session's
only when the agent edits content that holds it (its view held the user's bytes: it read them, or
was shown the merge) or a command rewrites the file holding it.

``known`` is, for each path, the session's own last content on disk: what the user's bytes on
disk (if any) were made from, hence the base of every restoration. ``dirty`` lists the paths
where that differs from the state at the head (a conflict, or the head moved without the files).
``conflicts`` holds, for paths a restoration or a command left in conflict, the session's side:
when the disk equals it (the user took the session's version) the file is resolved, and the next
restoration starts from it (``restore_sides``).

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

FORMAT = 4
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

    def author(self, path: str) -> str: ...


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
        self.conflicts: dict[str, Hash] = {}
        # node -> paths whose entry there is the user's disk (first sight, or taken by the
        # session: see ``_took``), not the session's own content.
        self.by_user: dict[int, set[str]] = {}
        self.took_here: set[str] = set()  # paths taken from the user since the head moved
        # node -> path -> the hook whose command made that node's entry (``HookRan``'s ``hook``).
        self.by_hook: dict[int, dict[str, str]] = {}
        self.pending_hooks: dict[str, str] = {}  # the same, for pending entries
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
            self._first_sight(event.path, event.disk)
            if event.outcome in ("direct", "merged", "conflict_markers"):
                # The agent's own content; a merge with the user's concurrent edit is not (the
                # result holds the user's bytes). Markers hold both sides: taken as written.
                own = event.result if event.outcome == "conflict_markers" else event.proposed
                if event.base != self.known.get(event.path, event.base):
                    # The agent's view held bytes that are not the session's (it read the
                    # user's edit, or was shown a merge with it): its edit takes them.
                    self._took(event.path, event.disk)
                self.pending[event.path] = own
                self.pending_hooks.pop(event.path, None)
                self.conflicts.pop(event.path, None)
                self._own(event.path, own)
        elif isinstance(event, Session.FileObserved):
            self._first_sight(event.path, event.hash)
        elif isinstance(event, Session.HookRan):
            if not event.tool_use_id:  # a call's hooks are in its ``files_changed``
                self._hook_changed(event.hook, event.effect.get("files_changed") or ())
        elif isinstance(event, Session.HeadMoved):
            self._move_head(_num(event.node))
        elif isinstance(event, Session.WorkspaceRestored):
            # Recorded before the head moves.
            for entry in event.entries:
                self._restored(entry["path"], entry)
        elif isinstance(event, Session.Started):
            self.session = str(event.originator_id)
            self.parent_session = event.parent_session
            self.parent_node = event.parent_node

    def _restored(self, path: str, entry: dict[str, Any]) -> None:
        outcome = entry["outcome"]
        if outcome == "error":
            # Nothing is known of what the disk holds: the next restoration looks again.
            if path in self.known:
                self.dirty.add(path)
        elif outcome == "conflict":
            # Left as the user has it, made from the session's own content (``known``, still the
            # base); the session's side is kept so that taking it resolves the file.
            self.conflicts[path] = entry["target"]
            if path not in self.known:
                self.known[path] = entry["base"]
            self.dirty.add(path)
        else:
            # The disk holds the target, plus the user's own bytes when merged: the session's
            # own content is the target.
            self.conflicts.pop(path, None)
            self._own(path, entry["target"])

    def _new_node(self, node: int, parent: int, event: Any) -> None:
        if parent != self.head:
            self._flush_pending()
        shell_changes = getattr(event, "files_changed", None) or []
        for change in shell_changes:
            path = change["path"]
            if path in self.pending or change.get("outcome") == "conflict":
                continue
            self._first_sight(path, change.get("before"))
            before = change.get("before")
            if before != self.known.get(path, before) and "own" not in change:
                # The command rewrote a file holding the user's bytes: it takes them. (A change
                # merged with a concurrent edit records its ``own`` version without them.)
                self._took(path, before)
        self.parent[node] = parent
        self.depth[node] = self.depth[parent] + 1
        self.took_here.clear()
        changes = dict(self.pending) if parent == self.head else {}
        hooked = dict(self.pending_hooks) if parent == self.head else {}
        # The edit tools list their change in ``files_changed`` too, with the merge result as
        # ``after``: their ``EditApplied`` said what the session's own content is.
        edited = set(self.pending)
        self.pending = {}
        self.pending_hooks = {}
        for path in sorted(self.dirty):
            # The disk did not hold the head's state for these (files restored without the
            # conversation, or a conflict): the new node starts from the session's own content
            # on disk, never from the user's bytes on it.
            changes.setdefault(path, self.known[path])
        self.dirty.clear()
        for change in shell_changes:
            path = change["path"]
            if path in edited:
                continue
            if change.get("outcome") == "conflict":
                # Not applied: the user's version stays; the command's is the session's side.
                self.conflicts[path] = change.get("proposed")
                continue
            # A change merged with a concurrent edit: the command's own version, not the merge.
            own = change["own"] if "own" in change else change.get("after")
            changes[path] = own
            if change.get("by"):
                hooked[path] = str(change["by"])
            else:
                hooked.pop(path, None)
            self.known[path] = own
            self.conflicts.pop(path, None)
        if changes:
            self.entries[node] = changes
        if hooked:
            self.by_hook[node] = {p: h for p, h in hooked.items() if p in changes}
        self.head = node

    def _hook_changed(self, hook: str, changes: Iterable[dict[str, Any]]) -> None:
        """A hook's command changed files outside any call: the session's own content (a hook
        runs for the session, in its sandbox), at the head, or pending before the first node
        (the root holds the user's disk, never a change)."""
        for change in changes:
            path = str(change["path"])
            if change.get("outcome") == "conflict":
                self.conflicts[path] = change.get("proposed")
                continue
            self._first_sight(path, change.get("before"))
            before = change.get("before")
            if before != self.known.get(path, before) and "own" not in change:
                self._took(path, before)
            own = change["own"] if "own" in change else change.get("after")
            if self.head == 0 or path in self.took_here:
                # Pending (the next node's): the root is the user's disk, and a version of the
                # user's just recorded at the head stays there.
                self.pending[path] = own
                self.pending_hooks[path] = hook
            else:
                self._session_wrote(self.head, (path,))
                self.entries.setdefault(self.head, {})[path] = own
                self.by_hook.setdefault(self.head, {})[path] = hook
            self.conflicts.pop(path, None)
            self._own(path, own)

    def _first_sight(self, path: str, value: Hash) -> None:
        """The disk held ``value``. The first sight of a path is recorded at the root, as the
        user's (nothing in the session had touched it: as far as the session knows it was like
        this from the start). Later sights change nothing: what the user does to a file stays
        the user's."""
        if path in self.known or path in self.pending:
            return
        current = self._local_value(self.head, path)
        if current is not MISSING:
            self.known[path] = current  # a state the session made: its own content
            return
        root = self.entries.setdefault(0, {})
        if path not in root:
            root[path] = value
            self.by_user.setdefault(0, set()).add(path)
        self.known[path] = value

    def _took(self, path: str, disk: Hash) -> None:
        """The session takes the user's bytes on disk (``disk``) into its own content.

        The user's version is recorded at the head, as the user's, so that rewinding to the
        head (before the change that took it) brings the user's whole version back: the one
        case where a node's entry changes after it was made, because the change destroys the
        only copy of the user's bytes a move could bring back. Only the first such version per
        path and node: a later one in the same step holds the session's earlier change.
        """
        if path in self.took_here:
            return
        self.took_here.add(path)
        self.entries.setdefault(self.head, {})[path] = disk
        self.by_user.setdefault(self.head, set()).add(path)

    def _session_wrote(self, node: int, paths: Iterable[str]) -> None:
        users = self.by_user.get(node)
        if users:
            users.difference_update(paths)

    def _own(self, path: str, value: Hash) -> None:
        """The session's own content on disk for ``path`` is now ``value``."""
        self.known[path] = value
        if value == self._local_current(path):
            self.dirty.discard(path)
        else:
            self.dirty.add(path)

    def _flush_pending(self) -> None:
        # Edits made at the head and never attached to a node: the disk holds them at the head.
        if self.pending:
            self._session_wrote(self.head, self.pending)
            self.entries.setdefault(self.head, {}).update(self.pending)
            hooks = self.by_hook.setdefault(self.head, {})
            for path in self.pending:
                if path in self.pending_hooks:
                    hooks[path] = self.pending_hooks[path]
                else:
                    hooks.pop(path, None)
            if not hooks:
                del self.by_hook[self.head]
            self.pending = {}
            self.pending_hooks = {}

    def _move_head(self, new: int) -> None:
        self._flush_pending()
        self.took_here.clear()
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
            "conflicts": sorted(self.conflicts.items()),
            "by_user": [[node, sorted(paths)] for node, paths in sorted(self.by_user.items())],
            "took_here": sorted(self.took_here),
            "by_hook": [
                [node, sorted(paths.items())] for node, paths in sorted(self.by_hook.items())
            ],
            "pending_hooks": sorted(self.pending_hooks.items()),
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
        fs.conflicts = dict(state["conflicts"])
        fs.by_user = {int(node): set(paths) for node, paths in state["by_user"]}
        fs.took_here = set(state["took_here"])
        fs.by_hook = {int(node): dict(paths) for node, paths in state["by_hook"]}
        fs.pending_hooks = dict(state["pending_hooks"])
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

        A path is restored when the target's content differs from the session's own last content
        on disk (``known``), which is the base: the user's bytes on disk are merged onto the
        target, never taken for the session's. Only paths that can differ are looked at: those
        changed between the head and the target, those left dirty or in conflict, and pending
        edits.
        """
        num = self._require(target)
        candidates: dict[str, None] = dict.fromkeys(self._changed_between(self.head, num))
        candidates.update(dict.fromkeys(sorted(self.dirty)))
        candidates.update(dict.fromkeys(sorted(self.conflicts)))
        candidates.update(dict.fromkeys(self.pending))
        plan = []
        wants = self._values(num, candidates)
        for path in candidates:
            want = wants[path]
            if want is MISSING:
                continue  # never touched on the way to the target: leave it as it is
            own = self.known[path] if path in self.known else self.current(path)
            if own is MISSING or own != want or path in self.conflicts:
                plan.append((path, None if own is MISSING else own, want))
        return sorted(plan)

    def restore_sides(self) -> dict[str, Hash]:
        """For paths in conflict, the session's side: a disk equal to it holds no user bytes (the
        user took the session's version), so a restoration starts from it."""
        return dict(self.conflicts)

    def author_at(self, node: NodeId | None, path: str) -> str:
        """Who made the bytes of ``path`` at ``node``: "session" (an agent's edit, a command, a
        restoration) or "user" (what the user's disk held when the session first saw it, or
        when the session took the user's bytes into its own content)."""
        return self.origin_at(node, path)[0]

    def origin_at(self, node: NodeId | None, path: str) -> tuple[str, NodeId | None]:
        """``author_at`` and the node whose entry gives ``path``'s bytes at ``node`` (None: the
        start of the session, or the parent session's state for a fork)."""
        num = self._require(node)
        while True:
            changes = self.entries.get(num)
            if changes is not None and path in changes:
                author = "user" if path in self.by_user.get(num, ()) else "session"
                return author, (str(num) if num else None)
            if num == 0:
                break
            num = self.parent[num]
        if self.inherit is not None:
            return self.inherit.author(path), None
        return "user", None

    def made_by(self, node: NodeId | None, path: str) -> str | None:
        """The hook whose command made ``path``'s content at ``node`` (its nearest entry on
        root->node), or None (an edit, a command, the user's disk)."""
        num = self._require(node)
        while True:
            changes = self.entries.get(num)
            if changes is not None and path in changes:
                return self.by_hook.get(num, {}).get(path)
            if num == 0:
                return None
            num = self.parent[num]

    def hooks_at(self, node: NodeId | None) -> dict[str, str]:
        """Paths whose entry at ``node`` a hook's command made, and the hook's identity."""
        return dict(sorted(self.by_hook.get(self._require(node), {}).items()))

    def files_at(self, node: NodeId | None) -> list[dict[str, Any]]:
        """The entries recorded at ``node`` (the root: None), each with its author (and the hook
        that made it, ``by``)."""
        num = self._require(node)
        hooks = self.by_hook.get(num, {})
        return [
            {
                "path": path,
                "hash": value,
                "author": "user" if path in self.by_user.get(num, ()) else "session",
                **({"by": hooks[path]} if path in hooks else {}),
            }
            for path, value in sorted(self.entries.get(num, {}).items())
        ]


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

    def author(self, path: str) -> str:
        return self._states().author_at(self._node, path)


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
