"""Fork, checkout, rewind and label: moving through a session's tree, conversation and files.

Every command is recorded in the session: the head moves with ``HeadMoved`` (reason ``fork``,
``checkout`` or ``rewind``) and the files brought back are listed in one ``WorkspaceRestored``
(per path: outcome and the hashes involved). Nothing is deleted, so every move can be undone by
moving back.

File restoration is ``coder_es.workspace.restore.restore_files``: per path the workspace's
three-way merge (without the agent's ``EditApplied`` events), base = the session's own last
content of the file (never a merge result holding the user's bytes), theirs = the disk now, ours
= the target node's content, run in batches so that thousands of files cost about what ``git
checkout`` costs. A file the user has not touched is simply replaced; a user's edit that does not
overlap the change survives, this time and every later time; an overlapping one leaves the file
exactly as the user has it and is reported as a conflict (``MoveResult.conflicts``). A conflicted
file stays the user's until the disk equals the session's side (the user took it): then the next
restoration starts from it (``FileStates.restore_sides``). No node's state is redefined by a move
(``projections.files``, "Authorship" in docs/DESIGN.md). Only the paths that differ between where
the workspace is and the target are looked at, so the cost grows with what changed, not with the
size of the workspace or of the history.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast
from uuid import UUID

from eventsourcing.application import project_aggregate
from eventsourcing.persistence import IntegrityError

from coder_es.application import CoderApp
from coder_es.domain.session import NodeId, Session
from coder_es.domain.settings import recorded_settings
from coder_es.errors import CoderESError, StoreError, UsageError
from coder_es.sealed_names import resolve_plan
from coder_es.workspace.atomic import clean_scratch, scratch_dir
from coder_es.workspace.restore import (
    UNCHANGED,
    FileRestoration,
    Progress,
    restore_files,
)
from coder_es.workspace.sandbox import Sandbox
from projections.checkpoint import Tracked
from projections.files import FileStates, track_files
from projections.node_diff import NodeDiff, node_diff
from projections.tree import ConversationTree, track_tree


class RestoreError(CoderESError):
    """A restoration could not run at all (the workspace is missing)."""


class ConcurrentChangeError(CoderESError):
    """Another writer appended to the session while a command ran; the command recorded nothing."""


@dataclass(frozen=True)
class MoveResult:
    """What a fork, checkout or rewind did."""

    session: str
    reason: str
    node: NodeId | None
    previous: NodeId | None
    head_moved: bool
    files: tuple[FileRestoration, ...] = ()
    forked_from: tuple[str, NodeId | None] | None = None

    @property
    def conflicts(self) -> list[FileRestoration]:
        return [f for f in self.files if f.problem]

    def to_json(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "reason": self.reason,
            "node": self.node,
            "previous": self.previous,
            "head_moved": self.head_moved,
            "files": [f.to_json() for f in self.files],
            "conflicts": [f.path for f in self.conflicts],
            "forked_from": None
            if self.forked_from is None
            else {"session": self.forked_from[0], "node": self.forked_from[1]},
        }


@dataclass(frozen=True)
class LabelMove:
    """What ``label`` did: ``previous`` is where the label was (None: it is new)."""

    session: str
    name: str
    node: NodeId
    previous: NodeId | None

    def describe(self) -> str:
        if self.previous is None:
            return f"labelled {self.node} {self.name}"
        if self.previous == self.node:
            return f"label {self.name} already names {self.node}"
        return f"moved label {self.name} from {self.previous} to {self.node}"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "node": self.node, "previous": self.previous}


@dataclass
class SessionViews:
    """The tracked projections of one session, kept open between commands."""

    tree: Tracked[ConversationTree]
    files: Tracked[FileStates]

    def catch_up(self, events: Sequence[Any] | None = None) -> tuple[ConversationTree, FileStates]:
        """Both projections brought up to date; the log read once for both (``events``: read
        already, from at most the lower of their positions on)."""
        if events is None:
            lowest = min(self.tree.position, self.files.position)
            events = self.tree.app.session_events(self.tree.session_id, gt=lowest)
        return self.tree.catch_up(events), self.files.catch_up(events)


F = TypeVar("F", bound=Callable[..., Any])


def _one_writer(purpose: str) -> Callable[[F], F]:
    """A command that writes to a session holds the session's lease (one writer per session):
    a running turn or another command makes it fail at once, before any file is touched. The
    command gets the session's resolved id."""

    def wrap(command: F) -> F:
        @functools.wraps(command)
        def leased(self: Branching, session: str | UUID, *args: Any, **kwargs: Any) -> Any:
            sid = self._sid(session)
            with self.app.leases.hold(str(sid), purpose):
                return command(self, sid, *args, **kwargs)

        return cast(F, leased)

    return wrap


@dataclass
class Branching:
    """The branching commands over one application and one workspace directory."""

    app: CoderApp
    workspace: Path
    checkpoint_every: int = 1000
    _views: dict[UUID, SessionViews] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.workspace = Path(self.workspace)

    # ------------------------------------------------------------------ views

    def views(self, session_id: UUID, events: Sequence[Any] | None = None) -> SessionViews:
        """The session's projections, up to date (``events``: the whole log, already read)."""
        views = self._views.get(session_id)
        if views is None:
            views = SessionViews(
                track_tree(self.app, session_id, every=self.checkpoint_every),
                track_files(self.app, session_id, every=self.checkpoint_every),
            )
            self._views[session_id] = views
            if events is None:
                lowest = min(views.tree.position, views.files.position)
                events = self.app.session_events(session_id, gt=lowest)
            # Opening: checkpoint if the log ran far ahead of the stored views.
            views.tree.open(events=events)
            views.files.open(events=events)
        else:
            views.catch_up(events)
        return views

    def tree(self, session: str | UUID) -> ConversationTree:
        return self.views(self._sid(session)).tree.projection

    def files(self, session: str | UUID) -> FileStates:
        return self.views(self._sid(session)).files.projection

    def checkpoint(self) -> None:
        """Write every open projection's checkpoint (the next opening replays nothing)."""
        for views in self._views.values():
            views.tree.save()
            views.files.save()

    def keep_views(self) -> None:
        """After a command: bring the open projections up to date and store them unless they
        are stored already, so that the next command opens them without replaying this one's
        events (a restoration's hold thousands of files: replaying them is most of what a
        later command would otherwise spend before its own work)."""
        for views in self._views.values():
            views.catch_up()
            views.tree.checkpoint()
            views.files.checkpoint()

    def _sid(self, session: str | UUID) -> UUID:
        return session if isinstance(session, UUID) else self.app.resolve_session(session)

    def _load(self, session: str | UUID) -> tuple[Session, ConversationTree, FileStates]:
        """The session and its projections, from one read of its log: a restoration's events
        hold thousands of files each, and decoding them is most of a command's own cost
        (``bench/rewind.py --whole``)."""
        sid = self._sid(session)
        events: list[Any] | None = None
        try:
            events = self.app.session_events(sid)
            found = project_aggregate(None, events)
        except StoreError:
            raise
        except Exception:  # a damaged log: ``get_session`` names the problem
            found = None
        if isinstance(found, Session):
            # Projected here, not by ``get_session``: it records into this application, so it
            # seals (and unseals names) with the application's sealing, as ``get_session`` sets.
            found.sealing = self.app.sealing
            s = found
        else:
            s = self.app.get_session(sid)
        views = self.views(s.id, events if found is s else None)
        return s, views.tree.projection, views.files.projection

    # ------------------------------------------------------------------ commands

    @_one_writer("label")
    def label(
        self, session: str | UUID, node: str, name: str, *, check_name: bool = True
    ) -> LabelMove:
        """Name a node; a label that named another node moves (``coder_es.domain.refs``).
        ``check_name=False`` re-issues a recorded label whatever its name (replay)."""
        sid = self._sid(session)

        def command(s: Session) -> LabelMove:
            resolved = s.resolve_node(node)
            previous = s.labels.get(name)
            s.label(resolved, name, check_name=check_name)
            return LabelMove(str(s.id), name, resolved, previous)

        return self.app.update(sid, command)

    @_one_writer("checkout")
    def checkout(
        self, session: str | UUID, node: str, *, progress: Progress | None = None
    ) -> MoveResult:
        s, _tree, files = self._load(session)
        target = s.resolve_node(node)
        return self._move(
            s, files, target, reason="checkout", move_head=True, restore=True, progress=progress
        )

    @_one_writer("rewind")
    def rewind(
        self,
        session: str | UUID,
        node: str,
        *,
        conversation: bool = True,
        files: bool = True,
        progress: Progress | None = None,
    ) -> MoveResult:
        if not (conversation or files):
            msg = "rewind needs the conversation, the files, or both"
            raise UsageError(msg)
        s, tree, fs = self._load(session)
        target = s.resolve_node(node)
        if not tree.is_ancestor(target, s.head):
            msg = (
                f"node {target} is not on the path to the head ({s.head}); "
                "rewind goes back along the current branch, use checkout to switch branches"
            )
            raise UsageError(msg)
        return self._move(
            s,
            fs,
            target,
            reason="rewind",
            move_head=conversation,
            restore=files,
            progress=progress,
        )

    @_one_writer("fork")
    def fork(
        self,
        session: str | UUID,
        node: str | None = None,
        *,
        new_session: bool = False,
        progress: Progress | None = None,
    ) -> MoveResult:
        s, _tree, files = self._load(session)
        target = s.head if node is None else s.resolve_node(node)
        if not new_session:
            return self._move(
                s, files, target, reason="fork", move_head=True, restore=True, progress=progress
            )
        restored = self._restore(files, target, s.id, progress)
        if restored:
            # The parent's workspace changed under it: it must know, so that moving its own head
            # later restores its files from what the disk really holds.
            s.restore_workspace(node=target, entries=[r.to_json() for r in restored])
            self._save(s, restored)
        child = Session.start(
            workspace=s.workspace,
            agent=s.agent,
            provider=s.provider,
            model=s.model,
            title=s.title,
            parent_session=str(s.id),
            parent_node=target,
            # The permissions, hooks and budget in force too, not only those it started with.
            settings=recorded_settings(self.app.session_events(s.id)).carried(),
            sealing=s.sealing,
        )
        self._save(child, restored)
        return MoveResult(
            session=str(child.id),
            reason="fork",
            node=None,
            previous=None,
            head_moved=False,
            files=tuple(restored),
            forked_from=(str(s.id), target),
        )

    def diff(self, session: str | UUID, a: str, b: str) -> NodeDiff:
        s, tree, files = self._load(session)
        return node_diff(self.app, s, tree, files, a, b)

    # ------------------------------------------------------------------ moving

    def _move(
        self,
        s: Session,
        files: FileStates,
        target: NodeId | None,
        *,
        reason: str,
        move_head: bool,
        restore: bool,
        progress: Progress | None = None,
    ) -> MoveResult:
        previous = s.head
        restored = self._restore(files, target, s.id, progress) if restore else []
        # The restoration is recorded first: the disk it found is the disk at the old head.
        if restored:
            s.restore_workspace(node=target, entries=[r.to_json() for r in restored])
        if move_head:
            s.move_head(target, reason=reason)
        # One save: the head move and the restoration are recorded together or not at all.
        self._save(s, restored)
        return MoveResult(
            session=str(s.id),
            reason=reason,
            node=target if move_head else previous,
            previous=previous,
            head_moved=move_head,
            files=tuple(restored),
        )

    def _save(self, s: Session, restored: list[FileRestoration]) -> None:
        try:
            self.app.save(s)
        except IntegrityError:
            touched = ", ".join(r.path for r in restored if r.outcome != UNCHANGED) or "none"
            msg = (
                f"session {s.id} changed while this command ran; nothing was recorded "
                f"(files already restored: {touched}); run the command again"
            )
            raise ConcurrentChangeError(msg) from None

    def _restore(
        self,
        files: FileStates,
        target: NodeId | None,
        session: UUID,
        progress: Progress | None = None,
    ) -> list[FileRestoration]:
        """Restore the files that differ; ``progress(done, total)`` after each one."""
        # A sealed file name (one that looks like a credential) is restored under its real name.
        plan, unresolved = resolve_plan(self.app, session, files.restore_plan(target))
        if not plan:
            return unresolved
        if not self.workspace.is_dir():
            msg = f"cannot restore files: the workspace {self.workspace} is not a directory"
            raise RestoreError(msg)
        sandbox = Sandbox(self.workspace)
        clean_scratch(sandbox.root)
        # Content holding a secret is sealed in the session's own scope (forget shreds it).
        blobs = self.app.blobs.for_session(session)
        restored = restore_files(
            sandbox,
            plan,
            blobs,
            progress=progress,
            scratch=scratch_dir(sandbox.root),
            sides=files.restore_sides(),
        )
        return restored + unresolved
