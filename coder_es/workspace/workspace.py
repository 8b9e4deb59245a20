"""The agent's window onto a project directory: reads, writes and edits that never lose a user's
concurrent change.

Every read stores the content as a blob and records a ``FileObserved`` event; the agent's *view*
of a file is the content of its last read or write. Writes and edits are computed against that
view (the base) and merged with what the disk holds now (theirs), then written atomically with a
compare-and-swap re-check (merging again if the disk moved in between). Every outcome is an
``EditApplied`` event carrying the base, disk, proposed and result hashes, their contents in the
blob store, so rewinds and audits can reconstruct each step.

The workspace depends only on a ``BlobStore`` and an ``EventSink`` (the two ``Session`` methods
it calls), not on the application or a store backend.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from coder_es.domain.session import Session
from coder_es.store.blobs import BlobStore
from coder_es.workspace.atomic import clean_scratch, read_current, scratch_dir
from coder_es.workspace.confined import ConfinedDir
from coder_es.workspace.contents import ContentMerge
from coder_es.workspace.errors import InvalidPathError
from coder_es.workspace.ignore import IgnoreMatcher
from coder_es.workspace.matching import MatchError, replace
from coder_es.workspace.merge import ConflictRegion
from coder_es.workspace.merge_write import ConflictPolicy, DiskMerge, merge_at, merge_onto_disk
from coder_es.workspace.protected import check_writable
from coder_es.workspace.sandbox import ResolvedPath, Sandbox
from coder_es.workspace.stat_index import StatIndex
from coder_es.workspace.text import adopt_style, decode_text, unified_diff

Outcome = Literal["direct", "merged", "conflict", "conflict_markers", "error"]
Operation = Literal["write", "edit", "restore"]

# Outcomes after which the file holds what the agent (or the session) now believes it holds.
VIEW_OUTCOMES = frozenset({"direct", "merged", "conflict_markers"})
MESSAGE_DIFF_LINES = 60
OURS_LABEL = "agent"
THEIRS_LABEL = "disk"


class EventSink(Protocol):
    """Where file events go; a ``Session`` aggregate is one."""

    def observe_file(
        self, *, path: str, hash: str | None, size: int | None, tool_use_id: str | None = None
    ) -> None: ...

    def apply_edit(
        self,
        *,
        path: str,
        base: str | None,
        disk: str | None,
        proposed: str | None,
        result: str | None,
        outcome: str,
        conflicts: int = 0,
        tool_use_id: str | None = None,
    ) -> None: ...


@dataclass(frozen=True, slots=True)
class ReadResult:
    """A snapshot of one file. ``text`` is None for binary or non-UTF-8 content."""

    path: str
    exists: bool
    hash: str | None
    size: int | None
    data: bytes
    text: str | None

    @property
    def binary(self) -> bool:
        return self.exists and self.text is None


@dataclass(frozen=True, slots=True)
class EditResult:
    """The outcome of a write, edit or restore, for the tool layer to turn into tool output.

    ``diff`` shows what this operation changed on disk (empty if nothing, or binary). For
    conflicts ``marked`` is the merge with git-style markers: written to the file under the
    ``markers`` policy, only reported under ``refuse``.
    """

    path: str
    operation: Operation
    outcome: Outcome
    message_for_agent: str
    diff: str
    conflicts: tuple[ConflictRegion, ...]
    base: str | None
    disk: str | None
    proposed: str | None
    result: str | None
    marked: str | None = None

    @property
    def ok(self) -> bool:
        """The agent's change is on disk (directly or merged with the user's)."""
        return self.outcome in ("direct", "merged")

    @property
    def changed_disk(self) -> bool:
        return self.result != self.disk

    def as_file_change(self) -> dict[str, Any] | None:
        """The ``files_changed`` entry of this operation, or None when the disk did not change."""
        if not self.changed_disk:
            return None
        return {"path": self.path, "before": self.disk, "after": self.result}


class Workspace:
    """File operations of one session on one project directory."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        blobs: BlobStore,
        sink: EventSink,
        *,
        conflict_policy: ConflictPolicy = "refuse",
        allowed_outside: Iterable[str | os.PathLike[str]] = (),
        views: Mapping[str, str | None] | None = None,
    ) -> None:
        self.sandbox = Sandbox(root, allowed_outside)
        self.root: Path = self.sandbox.root
        self.blobs = blobs
        self.sink = sink
        self.conflict_policy: ConflictPolicy = conflict_policy
        self._views: dict[str, str | None] = dict(views or {})
        self._ignore = IgnoreMatcher(self.root)
        # Temporary files of atomic writes go here; those a killed writer left are removed now.
        self.scratch = scratch_dir(self.root)
        clean_scratch(self.root)

    # ------------------------------------------------------------------ views

    @property
    def views(self) -> Mapping[str, str | None]:
        """path -> hash of the agent's last read or write (None: it saw the file absent)."""
        return dict(self._views)

    def view(self, path: str, *, outside_ok: bool = False) -> str | None:
        return self._views.get(self.resolve(path, outside_ok=outside_ok).rel)

    def has_view(self, path: str, *, outside_ok: bool = False) -> bool:
        return self.resolve(path, outside_ok=outside_ok).rel in self._views

    @staticmethod
    def views_from_events(events: Iterable[object]) -> dict[str, str | None]:
        """Rebuild the views from a session's events (the cache kept here is equal to this)."""
        views: dict[str, str | None] = {}
        for event in events:
            if isinstance(event, Session.FileObserved):
                views[event.path] = event.hash
            elif isinstance(event, Session.EditApplied):
                if event.outcome in VIEW_OUTCOMES:
                    views[event.path] = event.result
            elif isinstance(event, Session.ToolCallCompleted):
                for change in event.files_changed:
                    if change.get("outcome") != "conflict":
                        views[str(change["path"])] = change.get("after")
            elif isinstance(event, Session.HookRan):
                # A hook's changes are the agent's view at once (its next edit must not fail).
                for change in event.effect.get("files_changed") or ():
                    if change.get("outcome") != "conflict":
                        views[str(change["path"])] = change.get("after")
            elif isinstance(event, Session.WorkspaceRestored):
                # A rewind or checkout brought these files to a node's content: the session's
                # version there is the base of the agent's next edit, not what a branch left
                # behind wrote (that base made the checkout's own change look like a user's
                # edit, and the edit's recorded content kept the abandoned branch's lines). A
                # conflict's file holds the user's version: the session's stays the base, so
                # the user's lines remain theirs; a file that could not be restored keeps its view.
                for entry in event.entries:
                    if entry.get("outcome") != "error":
                        views[str(entry["path"])] = entry.get("target")
        return views

    def note_changes(self, changes: Iterable[Any]) -> None:
        """Files changed by a shell command, as recorded in ``ToolCallCompleted.files_changed``:
        the agent's view of each becomes its new content. Call it after recording them."""
        for change in changes:
            if isinstance(change, Mapping):
                self._views[str(change["path"])] = change.get("after")
            else:
                self._views[change.path] = change.after

    # ------------------------------------------------------------------ paths and listing

    def resolve(self, path: str | os.PathLike[str], *, outside_ok: bool = False) -> ResolvedPath:
        return self.sandbox.resolve(path, outside_ok=outside_ok)

    def resolve_for_write(
        self, path: str | os.PathLike[str], *, outside_ok: bool = False
    ) -> ResolvedPath:
        """``resolve``, refusing the paths no tool writes (``workspace.protected``)."""
        rp = self.resolve(path, outside_ok=outside_ok)
        check_writable(rp, self.root)
        return rp

    def iter_files(self, path: str = ".", *, include_ignored: bool = False) -> Iterator[str]:
        """Files under ``path`` (relative to the root), skipping what ``.gitignore`` ignores."""
        start = "" if path in (".", "", "./") else self.resolve(path).rel
        if start and not (self.root / start).is_dir():
            if (self.root / start).is_file():
                yield start
            return
        yield from self._ignore.walk(start, include_ignored=include_ignored)

    def is_ignored(self, path: str) -> bool:
        rp = self.resolve(path)
        return self._ignore.is_ignored(rp.rel, rp.abs.is_dir())

    def stat_index(self) -> StatIndex:
        """A new stat index of the workspace (every file's content is snapshotted as a blob)."""
        return StatIndex(self.root, self.blobs, ignore=IgnoreMatcher(self.root))

    # ------------------------------------------------------------------ read

    def read(
        self, path: str, *, tool_use_id: str | None = None, outside_ok: bool = False
    ) -> ReadResult:
        """Snapshot the file (blob + ``FileObserved``); it becomes the agent's view."""
        rp = self.resolve(path, outside_ok=outside_ok)
        if rp.abs.is_dir():
            msg = f"{path} is a directory, not a file"
            raise InvalidPathError(msg)
        data = read_current(rp.abs)
        if data is None:
            self.sink.observe_file(path=rp.rel, hash=None, size=None, tool_use_id=tool_use_id)
            self._views[rp.rel] = None
            return ReadResult(rp.rel, False, None, None, b"", None)
        digest = self.blobs.put(data, like=self._views.get(rp.rel))
        self.sink.observe_file(path=rp.rel, hash=digest, size=len(data), tool_use_id=tool_use_id)
        self._views[rp.rel] = digest
        return ReadResult(rp.rel, True, digest, len(data), data, decode_text(data))

    # ------------------------------------------------------------------ write / edit / restore

    def write(
        self,
        path: str,
        content: str | bytes,
        *,
        tool_use_id: str | None = None,
        outside_ok: bool = False,
        policy: ConflictPolicy | None = None,
    ) -> EditResult:
        """Write the whole file. A new file is created; an existing one must have been read."""
        rp = self.resolve_for_write(path, outside_ok=outside_ok)
        if rp.abs.is_dir():
            msg = f"{path} is a directory, not a file"
            raise InvalidPathError(msg)
        if rp.rel not in self._views:
            disk = read_current(rp.abs)
            if disk is not None:
                data = content.encode("utf-8") if isinstance(content, str) else content
                return self._refuse(
                    rp,
                    "write",
                    f"{rp.rel} already exists and you have not read it: read it first, then "
                    "write (or edit) it, so that nothing in it is overwritten unseen",
                    base=None,
                    disk=disk,
                    proposed=data,
                    tool_use_id=tool_use_id,
                )
            base_hash: str | None = None
        else:
            base_hash = self._views[rp.rel]
        if isinstance(content, str):
            base_text = decode_text(self.blobs.get(base_hash)) if base_hash else None
            if base_text is not None:
                content = adopt_style(content, base_text)
            data = content.encode("utf-8")
        else:
            data = content
        return self._apply(rp, "write", base_hash, data, tool_use_id=tool_use_id, policy=policy)

    def edit(
        self,
        path: str,
        old_string: str,
        new_string: str,
        replace_all: bool = False,
        *,
        tool_use_id: str | None = None,
        outside_ok: bool = False,
        policy: ConflictPolicy | None = None,
    ) -> EditResult:
        """Replace ``old_string`` in the agent's view of the file, then merge with the disk.

        An empty ``old_string`` creates a file that does not exist yet.
        """
        rp = self.resolve_for_write(path, outside_ok=outside_ok)
        known = rp.rel in self._views
        base_hash = self._views.get(rp.rel)
        if base_hash is None:
            disk = read_current(rp.abs)
            if old_string == "" and disk is None:
                return self._apply(
                    rp,
                    "edit",
                    None,
                    new_string.encode("utf-8"),
                    tool_use_id=tool_use_id,
                    policy=policy,
                )
            if disk is None:
                why = f"{rp.rel} does not exist"
            elif known:
                why = f"{rp.rel} did not exist when you last read it; read it again first"
            else:
                why = f"you have not read {rp.rel}: read it first, then edit it"
            return self._refuse(
                rp, "edit", why, base=None, disk=disk, proposed=None, tool_use_id=tool_use_id
            )
        base = self.blobs.get(base_hash)
        text = decode_text(base)
        if text is None:
            return self._refuse(
                rp,
                "edit",
                f"{rp.rel} is binary or not UTF-8 text; it cannot be edited by text replacement "
                "(use write to replace it whole)",
                base=base_hash,
                disk=read_current(rp.abs),
                proposed=None,
                tool_use_id=tool_use_id,
            )
        try:
            new_text = replace(text, old_string, new_string, replace_all=replace_all, path=rp.rel)
        except MatchError as e:
            return self._refuse(
                rp,
                "edit",
                str(e),
                base=base_hash,
                disk=read_current(rp.abs),
                proposed=None,
                tool_use_id=tool_use_id,
            )
        return self._apply(
            rp,
            "edit",
            base_hash,
            new_text.encode("utf-8"),
            tool_use_id=tool_use_id,
            policy=policy,
        )

    def restore(
        self,
        path: str,
        base_hash: str | None,
        target_hash: str | None,
        *,
        tool_use_id: str | None = None,
        outside_ok: bool = False,
        policy: ConflictPolicy | None = None,
    ) -> EditResult:
        """Bring one file to ``target_hash`` (None: delete it) through the same merge.

        ``base_hash`` is what the session last knew the file held (None: absent). A user edit
        made since then survives when it does not overlap the restore; an overlapping one leaves
        the file as the user has it and reports a conflict.
        """
        rp = self.resolve(path, outside_ok=outside_ok)
        target = self.blobs.get(target_hash) if target_hash is not None else None
        return self._apply(rp, "restore", base_hash, target, tool_use_id=tool_use_id, policy=policy)

    # ------------------------------------------------------------------ the merge-and-write step

    def _apply(
        self,
        rp: ResolvedPath,
        operation: Operation,
        base_hash: str | None,
        proposed: bytes | None,
        *,
        tool_use_id: str | None,
        policy: ConflictPolicy | None,
    ) -> EditResult:
        step = self._merge(rp, base_hash, proposed, policy or self.conflict_policy)
        disk, merge, target = step.disk, step.merge, step.written
        disk_hash = self._put(disk, like=base_hash)
        proposed_hash = self._put(proposed, like=base_hash)
        result_hash = self._put(target, like=disk_hash)
        outcome = _outcome(merge, base_hash, disk_hash, target != disk)
        self.sink.apply_edit(
            path=rp.rel,
            base=base_hash,
            disk=disk_hash,
            proposed=proposed_hash,
            result=result_hash,
            outcome=outcome,
            conflicts=len(merge.conflicts) if merge.kind == "conflict" else 0,
            tool_use_id=tool_use_id,
        )
        if outcome in VIEW_OUTCOMES:
            self._views[rp.rel] = result_hash
        message = _message(rp.rel, operation, outcome, merge, disk, proposed, target)
        return EditResult(
            path=rp.rel,
            operation=operation,
            outcome=outcome,
            message_for_agent=message,
            diff=unified_diff(disk, target, rp.rel),
            conflicts=merge.conflicts,
            base=base_hash,
            disk=disk_hash,
            proposed=proposed_hash,
            result=result_hash,
            marked=merge.data.decode("utf-8") if merge.kind == "conflict" and merge.data else None,
        )

    def _merge(
        self,
        rp: ResolvedPath,
        base_hash: str | None,
        proposed: bytes | None,
        policy: ConflictPolicy,
    ) -> DiskMerge:
        """The merge-and-write of ``rp``: a file in the workspace named from the root's
        descriptor (``confined``: no directory on the way is a link swapped in since the path
        was resolved); an allowed one outside by its path."""
        kw: dict[str, Any] = {
            "name": rp.rel,
            "policy": policy,
            "ours_label": OURS_LABEL,
            "theirs_label": THEIRS_LABEL,
            "scratch": self.scratch,
        }
        if not rp.inside:
            return merge_onto_disk(rp.abs, base_hash, proposed, self.blobs, **kw)
        # No guard: what a tool may write is decided above (``protected``, the permission
        # layer); a user may let the agent change ``.git/config``.
        with ConfinedDir(self.root, guard=False) as tree:
            try:
                dir_fd, file_name = tree.parent(rp.rel, create=proposed is not None)
            except FileNotFoundError:
                # Nothing to delete where even the directory is gone.
                return merge_onto_disk(rp.abs, base_hash, proposed, self.blobs, **kw)
            return merge_at(dir_fd, file_name, base_hash, proposed, self.blobs, **kw)

    def _refuse(
        self,
        rp: ResolvedPath,
        operation: Operation,
        why: str,
        *,
        base: str | None,
        disk: bytes | None,
        proposed: bytes | None,
        tool_use_id: str | None,
    ) -> EditResult:
        disk_hash = self._put(disk, like=base)
        proposed_hash = self._put(proposed, like=base)
        self.sink.apply_edit(
            path=rp.rel,
            base=base,
            disk=disk_hash,
            proposed=proposed_hash,
            result=disk_hash,
            outcome="error",
            conflicts=0,
            tool_use_id=tool_use_id,
        )
        return EditResult(
            path=rp.rel,
            operation=operation,
            outcome="error",
            message_for_agent=why,
            diff="",
            conflicts=(),
            base=base,
            disk=disk_hash,
            proposed=proposed_hash,
            result=disk_hash,
        )

    def _put(self, data: bytes | None, *, like: str | None) -> str | None:
        return None if data is None else self.blobs.put(data, like=like)


# ---------------------------------------------------------------------- outcome and messages


def _outcome(
    merge: ContentMerge, base_hash: str | None, disk_hash: str | None, wrote: bool
) -> Outcome:
    if merge.kind == "conflict":
        return "conflict_markers" if wrote else "conflict"
    return "direct" if disk_hash == base_hash else "merged"


def _message(
    path: str,
    operation: Operation,
    outcome: Outcome,
    merge: ContentMerge,
    disk: bytes | None,
    proposed: bytes | None,
    target: bytes | None,
) -> str:
    if outcome == "direct":
        if target == disk:
            return f"{path}: no change (it already holds that content)"
        if target is None:
            return f"Deleted {path}"
        verb = (
            "Created"
            if disk is None
            else {"write": "Wrote", "edit": "Edited"}.get(operation, "Restored")
        )
        return f"{verb} {path}"
    if outcome == "merged" and target == proposed:
        return (
            f"{path} had changed on disk since you last read it, to exactly the content you "
            "wanted; nothing needed writing"
        )
    if outcome == "merged":
        kept = unified_diff(proposed, target, path, max_lines=MESSAGE_DIFF_LINES)
        return (
            f"{path} had changed on disk since you last read it (the user or another process "
            "edited it). Your change was merged with theirs, and their edits were kept; the file "
            "now differs from your version by:\n"
            f"{kept}"
        )
    if merge.reason == "deleted_on_disk":
        return (
            f"{path} was deleted on disk since you last read it; nothing was written. Ask the "
            "user, or read it again (it does not exist now) and write it anew if it is still "
            "needed."
        )
    if merge.reason == "changed_on_disk":
        return (
            f"{path} was changed on disk since the session last knew it, so it was not "
            "deleted: it is left as the user has it."
        )
    if merge.reason == "binary":
        return (
            f"{path} changed on disk since you last read it, and it is binary (or not UTF-8 text) "
            "so the two versions cannot be merged. It was left as it is on disk; read it again."
        )
    return _conflict_message(path, outcome, merge.conflicts)


def _conflict_message(path: str, outcome: Outcome, conflicts: tuple[ConflictRegion, ...]) -> str:
    n = len(conflicts)
    places = "1 place" if n == 1 else f"{n} places"
    if outcome == "conflict_markers":
        head = (
            f"{path} changed on disk since you last read it and the changes overlap yours in "
            f"{places}. The file now contains git-style conflict markers "
            f"(<<<<<<< {OURS_LABEL} / ======= / >>>>>>> {THEIRS_LABEL}); resolve each one by "
            "editing the file, removing the markers."
        )
    else:
        head = (
            f"{path} changed on disk since you last read it and the changes overlap yours in "
            f"{places}. Nothing was written: the file is left as the user has it."
        )
    blocks = []
    for c in conflicts[:5]:
        blocks.append(
            f"Your {_span(c.start, c.end)} against {_span(c.theirs_start, c.theirs_end)} on "
            "disk:\n"
            f"<<<<<<< {OURS_LABEL} (your version)\n{_ensure_nl(c.ours)}"
            f"||||||| base (what you had read)\n{_ensure_nl(c.base)}"
            f"=======\n{_ensure_nl(c.theirs)}>>>>>>> {THEIRS_LABEL} (on disk now)"
        )
    if n > 5:
        blocks.append(f"... and {n - 5} more")
    hint = (
        "Read the file again to see its current content, then redo your change on top of it."
        if outcome == "conflict"
        else "Read the file again before editing it."
    )
    return "\n\n".join([head, *blocks, hint])


def _span(start: int, end: int) -> str:
    if end <= start:
        return f"insertion after line {start}" if start else "insertion at the top"
    return f"line {end}" if end == start + 1 else f"lines {start + 1}-{end}"


def _ensure_nl(text: str) -> str:
    return text if not text or text.endswith("\n") else text + "\n"
