"""Files as they were at a node: ``diff`` between two nodes, ``show SESSION NODE PATH``, and the
agent's version of a file whose edit conflicted with the user's.

Contents come from the blob store through the file-state projection (``projections.files``); the
diffs are the workspace's git-style unified diffs, so ``coder-es diff S A B | git apply`` works on
a workspace at A.

After a conflict the user's file stays on disk and the agent's version stays in the store. The
one way to take it, shown by ``run``/``chat`` and the branching commands, is
``coder-es show S NODE PATH --proposed > PATH`` (an edit's conflict: the agent's proposal at the
tool-result node) or ``coder-es show S NODE PATH > PATH`` (a restoration's conflict: the target
node's content).
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

from coder_es.application import CoderApp
from coder_es.domain.session import NodeId, Session
from coder_es.errors import UsageError
from coder_es.workspace.text import unified_diff
from projections.files import MISSING, FileStates
from projections.node_diff import NodeDiff


@dataclass(frozen=True)
class FilePatch:
    """One file that differs between two nodes."""

    path: str
    a: str | None
    b: str | None
    patch: str

    @property
    def status(self) -> str:
        return "added" if self.a is None else "deleted" if self.b is None else "modified"

    def counts(self) -> tuple[int, int]:
        """(lines added, lines removed), git --stat style."""
        added = removed = 0
        for line in self.patch.splitlines():
            if line.startswith("+") and not line.startswith("+++"):
                added += 1
            elif line.startswith("-") and not line.startswith("---"):
                removed += 1
        return added, removed

    def to_json(self) -> dict[str, Any]:
        added, removed = self.counts()
        return {
            "path": self.path,
            "a": self.a,
            "b": self.b,
            "status": self.status,
            "added": added,
            "removed": removed,
            "patch": self.patch,
        }


def _content(app: CoderApp, digest: str | None) -> bytes | None:
    return None if digest is None else app.blobs.get(digest)


def file_patches(app: CoderApp, diff: NodeDiff) -> list[FilePatch]:
    return [
        FilePatch(f.path, f.a, f.b, unified_diff(_content(app, f.a), _content(app, f.b), f.path))
        for f in diff.files
    ]


def render_stat(patches: list[FilePatch]) -> list[str]:
    width = max((len(p.path) for p in patches), default=0)
    lines = []
    total_added = total_removed = 0
    for p in patches:
        added, removed = p.counts()
        total_added += added
        total_removed += removed
        binary = p.patch.startswith("Binary file")
        plus, minus = "+" * min(added, 40), "-" * min(removed, 40)
        bar = "Bin" if binary else f"{added + removed:>4} {plus}{minus}"
        lines.append(f" {p.path:<{width}} | {bar}")
    lines.append(
        f" {len(patches)} file(s) changed, {total_added} insertion(s)(+), "
        f"{total_removed} deletion(s)(-)"
    )
    return lines


def workspace_path(workspace: Path, path: str) -> str:
    """The session's name for a path the user typed (workspace-relative, or absolute inside)."""
    if os.path.isabs(path):
        try:
            return Path(path).resolve().relative_to(workspace.resolve()).as_posix()
        except ValueError:
            return path  # outside the workspace: recorded by its absolute path
    return Path(os.path.normpath(path)).as_posix()


def content_at(
    app: CoderApp, files: FileStates, session: str, node: NodeId | None, path: str
) -> bytes:
    """The file as it was at ``node``; a clear error when it did not exist or was never seen."""
    value = files.value_at(node, path)
    where = f"node {node}" if node is not None else "the start of the session"
    if value is MISSING:
        msg = (
            f"session {session[:8]} never saw {path} up to {where} "
            "(it reads, writes and records changes of the files it touches)"
        )
        raise UsageError(msg)
    if value is None:
        msg = f"{path} did not exist at {where} of session {session[:8]}"
        raise UsageError(msg)
    return app.blobs.get(value)


@dataclass(frozen=True)
class UnappliedEdit:
    """An edit, write or command's change that conflicted with the user's: not on disk, kept
    here (``by``: "edit" or "command")."""

    node: NodeId
    path: str
    proposed: str | None  # None: a command deleted the file (its version is "absent")
    by: str = "edit"

    def take_command(self, session: str) -> str:
        path = shlex.quote(self.path)
        if self.proposed is None:
            return f"rm -- {path}"
        return f"coder-es show {session[:8]} {self.node} {path} --proposed > {path}"


def unapplied_edits(app: CoderApp, session: UUID | str, *, after: int = 0) -> list[UnappliedEdit]:
    """The conflicted edits recorded after event version ``after``, with their result nodes."""
    events = app.session_events(UUID(str(session)), gt=after)
    nodes = {
        e.tool_use_id: str(e.originator_version)
        for e in events
        if isinstance(e, Session.ToolCallCompleted)
    }
    out = []
    for e in events:
        if isinstance(e, Session.ToolCallCompleted):
            # A command's change the user's concurrent edit kept off the disk.
            for change in e.files_changed:
                if change.get("outcome") == "conflict":
                    at = str(e.originator_version)
                    proposed = change.get("proposed")
                    out.append(UnappliedEdit(at, change["path"], proposed, "command"))
            continue
        if not isinstance(e, Session.EditApplied) or e.outcome != "conflict" or not e.proposed:
            continue
        node = nodes.get(e.tool_use_id) if e.tool_use_id else None
        if node is not None:
            out.append(UnappliedEdit(node, e.path, e.proposed))
    return sorted(out, key=lambda u: int(u.node))


def proposed_at(app: CoderApp, session: UUID | str, node: NodeId, path: str) -> bytes:
    """The agent's version of ``path`` that the conflicted call (an edit or a command) at
    ``node`` left unapplied."""
    for edit in unapplied_edits(app, session):
        if edit.node == node and edit.path == path:
            if edit.proposed is None:
                msg = (
                    f"the command at node {node} deleted {path}; its version is no file: take it "
                    f"with {edit.take_command(str(session))}"
                )
                raise UsageError(msg)
            return app.blobs.get(edit.proposed)
    msg = (
        f"no conflicted edit of {path} at node {node}: --proposed shows the agent's version "
        "(of an edit or a command) that a conflict left unapplied (see the conflict message "
        "for its node)"
    )
    raise UsageError(msg)
