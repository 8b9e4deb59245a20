"""A shell command as a transaction: its upper directory, planned onto the real workspace, applied
through a journal and the same three-way merge as the edit tools.

Life of one transaction (a directory ``<workspace>/.coder-es/tx/<id>/``):

1. ``begin``: the directory, its ``lock`` (held with ``flock`` for as long as the transaction
   lives, so a recovery never touches a running one) and a ``started`` marker whose ctime is the
   command's start on the workspace's own clock.
2. The command runs with the overlay's upper/work directories inside it (``namespaces``).
3. ``plan``: the upper directory's entries (``upper.walk_upper``) become steps, in order: the
   deletions (files, then directories deepest first), then directories, files, symlinks. Each
   file step carries its merge *base*:

   - the workspace file was not changed during the command (its ctime is older than the marker):
     the disk is what the command started from, so base = the disk (the command's version
     applies as it is, still with a compare-and-swap against a change made right now);
   - the path is absent: base = absent (a creation never overwrites anything);
   - it changed during the command: base = what the session last knew of it (its view), or, for
     a file the session never saw, unknown: a conflict. The user's version stays on disk and the
     command's version is kept as a blob and reported; it is never overwritten silently.

4. ``commit``: the steps are written to ``journal.json`` (sealed with this user's journal key,
   ``coder_es.sandbox.journal``; fsynced, renamed into place) and then applied one by one.
   Every step is idempotent (a merge of what is already merged changes nothing), so a crash
   at any point is finished by ``recover`` on the next start: a transaction with a journal is
   rolled forward, one without is dropped (nothing of it reached the workspace). The directory
   is removed at the end either way.

What is recorded (``files_changed``) follows the stat index: regular files outside ignored paths
(``.gitignore``, ``.git``, ``.coder-es``). Everything else the command did (``.git`` internals,
ignored build output, directories, symlinks, modes) is applied too, just not recorded. Nothing is
ever applied under ``.coder-es`` or a hidden directory; fifos, sockets and device files are
skipped with a note.

Applying and recovering happen outside the sandbox, so both go through
``coder_es.workspace.confined``: every workspace path is reached from the workspace's directory
descriptor without following links and never under ``.coder-es/``, ``.git/hooks/`` or
``.git/config``; every source is read the same way from the transaction's own upper directory
(and must be named ``<upper>/<path>``). Recovery obeys only a journal sealed by this user's
coder-es (``journal``); any other is left where it is and reported in one line.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import secrets
import shutil
import stat as stat_mod
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coder_es.errors import CoderESError
from coder_es.sandbox import journal as sealed
from coder_es.sandbox.upper import UpperEntry, keep_users_bits, walk_upper
from coder_es.store.blobs import BlobStore
from coder_es.workspace.atomic import move_into_place_at, sync_dirs
from coder_es.workspace.confined import ConfinedDir, RefusedPathError
from coder_es.workspace.ignore import IgnoreMatcher

TX_DIRNAME = "tx"
STALE_UNLOCKED_S = 60
UNKNOWN = "?"  # a base nobody knows: the file is a conflict unless both sides agree
STORE_DIRNAME = ".coder-es"
JOURNAL_NAME = "journal.json"

log = logging.getLogger(__name__)


def tx_root(workspace: Path) -> Path:
    return workspace / STORE_DIRNAME / TX_DIRNAME


class CommitError(CoderESError):
    """The command's changes could not be journaled (a full disk): none of them was applied."""

    def __init__(self, why: str) -> None:
        super().__init__(
            f"the command's changes could not be applied ({why}); the workspace is unchanged"
        )


@dataclass(frozen=True)
class Applied:
    """The outcome of one file step, in the ``files_changed`` form when ``recorded``."""

    path: str
    before: str | None
    after: str | None
    outcome: str  # "direct" | "merged" | "conflict"
    proposed: str | None
    recorded: bool
    own: str | None = None  # merged: the command's change without the user's concurrent bytes


@dataclass
class Outcome:
    applied: list[Applied] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    moved_into: list[Path] = field(default_factory=list)  # directories to fsync once


class Transaction:
    """One command's transaction directory."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.upper = path / "upper"
        self.work = path / "work"
        self._lock_fd: int | None = None
        self.started_ns = 0
        self._unfinished = False  # journaled, not yet wholly applied: recovery must finish it

    @classmethod
    def begin(cls, workspace: Path) -> Transaction:
        root = tx_root(workspace)
        root.mkdir(parents=True, exist_ok=True)
        tx = cls(root / secrets.token_hex(8))
        tx.path.mkdir()
        tx._lock_fd = os.open(tx.path / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(tx._lock_fd, fcntl.LOCK_EX)
        tx.upper.mkdir()
        tx.work.mkdir()
        marker = tx.path / "started"
        marker.touch()
        tx.started_ns = os.lstat(marker).st_ctime_ns
        return tx

    def close(self) -> None:
        """Remove the directory (the transaction is committed or dropped); one whose apply
        failed midway is left, unlocked, for ``recover`` to finish."""
        if not self._unfinished:
            _remove_tree(self.path)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # ------------------------------------------------------------------ planning

    def plan(
        self,
        workspace: Path,
        views: Mapping[str, str | None],
        blobs: BlobStore,
        *,
        protected: Iterable[Path] = (),
    ) -> Plan:
        with ConfinedDir(workspace, guard=False) as disk:
            return Planner(workspace, views, blobs, self.started_ns, protected, disk).plan(
                walk_upper(str(self.upper))
            )

    def commit(self, plan: Plan, workspace: Path, blobs: BlobStore) -> Outcome:
        """Journal the plan, then apply it."""
        if not plan.steps:
            # Nothing to apply: nothing to journal (a seal and an fsync per command that
            # changed nothing, most of them).
            return Outcome(notes=list(plan.notes))
        journal = self.path / JOURNAL_NAME
        tmp = self.path / "journal.tmp"
        try:
            data = sealed.seal(plan.steps, plan.notes, tx=self.path.name, workspace=workspace)
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, journal)
        except OSError as e:
            raise CommitError(e.strerror or str(e)) from e
        self._unfinished = True
        outcome = apply_steps(plan.steps, workspace, blobs, self.upper)
        self._unfinished = False
        outcome.notes[:0] = plan.notes
        return outcome


@dataclass
class Plan:
    steps: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class Planner:
    """Turns upper entries into ordered, idempotent steps (see the module docstring)."""

    def __init__(
        self,
        workspace: Path,
        views: Mapping[str, str | None],
        blobs: BlobStore,
        started_ns: int,
        protected: Iterable[Path],
        disk: ConfinedDir,
    ) -> None:
        self.root = workspace
        self.disk = disk  # the workspace read without following links
        self.views = views
        self.blobs = blobs
        self.started_ns = started_ns
        self.ignore = IgnoreMatcher(workspace)
        self.protected = [
            p.relative_to(workspace).as_posix() for p in protected if workspace in p.parents
        ]
        self._ignored_dirs: dict[str, bool] = {}
        self.deletes: list[dict[str, Any]] = []
        self.rmdirs: list[str] = []
        self.creates: list[dict[str, Any]] = []
        self.notes: list[str] = []

    def plan(self, entries: Iterable[UpperEntry]) -> Plan:
        skipped: list[str] = []
        for e in entries:
            if any(_under(e.path, s) for s in skipped):
                continue
            if self._is_protected(e.path):
                self.notes.append(
                    f"{_shown(e.path)}: in the store or a protected directory; not applied"
                )
                skipped.append(e.path)
                continue
            if e.stripped:
                e = keep_users_bits(e, str(self.root))
                if e.stripped:
                    self.notes.append(f"{_shown(e.path)}: its setuid/setgid bits were removed")
            self._entry(e)
        # Deepest directories first, after the files in them are gone.
        rmdirs = [{"op": "rmdir", "path": p} for p in sorted(self.rmdirs, key=_depth, reverse=True)]
        return Plan([*self.deletes, *rmdirs, *self.creates], self.notes)

    def _entry(self, e: UpperEntry) -> None:
        st = self._lstat(e.path)
        is_dir = st is not None and stat_mod.S_ISDIR(st.st_mode)
        if e.kind == "deleted":
            self._remove(e.path, st)
        elif e.kind in ("dir", "opaque_dir"):
            if e.kind == "opaque_dir" and is_dir:
                self._remove_children(e.path)
            elif st is not None and not is_dir:
                self._remove(e.path, st)
            if st is None or not is_dir or stat_mod.S_IMODE(st.st_mode) != e.mode:
                self.creates.append({"op": "mkdir", "path": e.path, "mode": e.mode})
        elif e.kind == "file":
            base: str | None
            if st is not None and stat_mod.S_ISREG(st.st_mode):
                base = self._base(e.path, st)
            else:
                if st is not None:
                    self._remove(e.path, st)
                base = None
            data = _read(Path(e.source)) or b""
            recorded = self._recorded(e.path)
            # Stored before anything is applied: a full disk fails here, with nothing changed.
            like = None if base == UNKNOWN else base
            ours = self.blobs.put(data, like=like) if recorded else _hash(data)
            step = {"op": "file", "path": e.path, "source": e.source, "base": base, "ours": ours}
            self.creates.append({**step, "mode": e.mode, "record": recorded})
        elif e.kind == "symlink":
            if st is not None and not stat_mod.S_ISLNK(st.st_mode):
                self._remove(e.path, st)
            self.creates.append({"op": "symlink", "path": e.path, "link": e.link})
        else:
            self.notes.append(
                f"{_shown(e.path)}: a fifo, socket or device file; such files are not carried "
                "to the workspace"
            )

    def _base(self, rel: str, st: os.stat_result) -> str | None:
        """The merge base of a workspace file the command changed (see the module docstring)."""
        if st.st_ctime_ns < self.started_ns:
            data = self._read(rel)
            if data is None:
                return None
            if self._recorded(rel):
                # Stored now: it is the change's ``before`` and a later merge's base.
                return self.blobs.put(data, like=self.views.get(rel))
            return hashlib.sha256(data).hexdigest()
        if rel in self.views:
            return self.views[rel]
        return UNKNOWN

    def _remove(self, rel: str, st: os.stat_result | None) -> None:
        """Everything at ``rel`` in the workspace goes (a file, a symlink, a whole directory)."""
        if st is None:
            return
        if stat_mod.S_ISDIR(st.st_mode):
            self._remove_children(rel)
            self.rmdirs.append(rel)
        elif stat_mod.S_ISREG(st.st_mode):
            self.deletes.append(
                {
                    "op": "delete",
                    "path": rel,
                    "base": self._base(rel, st),
                    "record": self._recorded(rel),
                }
            )
        else:
            self.deletes.append({"op": "unlink", "path": rel})

    def _remove_children(self, rel: str) -> None:
        try:
            children = [(f"{rel}/{n}", st) for n, st in self.disk.entries(rel)]
        except (OSError, CoderESError):
            return
        for child, st in children:
            self._remove(child, st)

    def _recorded(self, rel: str) -> bool:
        parts = rel.split("/")
        for depth in range(1, len(parts)):
            prefix = "/".join(parts[:depth])
            ignored = self._ignored_dirs.get(prefix)
            if ignored is None:
                ignored = self.ignore.is_ignored(prefix, True)
                self._ignored_dirs[prefix] = ignored
            if ignored:
                return False
        return not self.ignore.is_ignored(rel, False)

    def _lstat(self, rel: str) -> os.stat_result | None:
        """``rel`` as the disk has it; None also below a link (the apply refuses it there)."""
        try:
            return self.disk.lstat(rel)
        except (OSError, CoderESError):
            return None

    def _read(self, rel: str) -> bytes | None:
        try:
            return self.disk.read(rel)
        except (OSError, CoderESError):
            return None

    def _is_protected(self, rel: str) -> bool:
        return _under(rel, STORE_DIRNAME) or any(_under(rel, p) for p in self.protected)


# ---------------------------------------------------------------------- applying


def apply_steps(
    steps: Iterable[dict[str, Any]], workspace: Path, blobs: BlobStore, upper: Path
) -> Outcome:
    """Apply journaled steps; each is idempotent, so a crash midway is finished by running all
    of them again. Paths go through ``ConfinedDir`` (the workspace; sources: ``upper``)."""
    out = Outcome()
    with ConfinedDir(workspace) as ws, ConfinedDir(upper, guard=False) as up:
        for step in steps:
            op, rel = step["op"], step["path"]
            try:
                _apply_step(op, rel, step, ws, up, upper, blobs, out)
            except (OSError, CoderESError) as e:
                out.notes.append(f"{_shown(rel)}: not applied ({e})")
        # Inside: the directories are named through descriptors that close with ``ws``.
        sync_dirs(out.moved_into)
    return out


def _apply_step(
    op: str,
    rel: str,
    step: dict[str, Any],
    ws: ConfinedDir,
    up: ConfinedDir,
    upper: Path,
    blobs: BlobStore,
    out: Outcome,
) -> None:
    if op == "file" or op == "delete":
        source = None
        if op == "file":
            source = _source(step, rel, up, upper)
            if source is None:
                return  # moved into place by an earlier run of this journal
        try:
            path = ws.path(rel, create=op == "file", removing=op == "delete")
        except FileNotFoundError:
            return  # a deletion where even the directory is gone
        _apply_file(step, path, source, ws, up, blobs, out)
    elif op == "unlink":
        with contextlib.suppress(FileNotFoundError):
            fd, name = ws.parent(rel, removing=True)
            if not stat_mod.S_ISDIR(os.lstat(name, dir_fd=fd).st_mode):
                os.unlink(name, dir_fd=fd)
    elif op == "rmdir":
        try:
            fd, name = ws.parent(rel, removing=True)
            os.rmdir(name, dir_fd=fd)
        except FileNotFoundError:
            pass
        except OSError:
            out.notes.append(
                f"{_shown(rel)}/: the command removed this directory, but it holds files "
                "made meanwhile by someone else; it was kept"
            )
    elif op == "mkdir":
        fd, name = ws.parent(rel, create=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, dir_fd=fd)
        if not stat_mod.S_ISDIR(os.lstat(name, dir_fd=fd).st_mode):
            raise FileExistsError(errno.EEXIST, "something else than a directory is there")
        ws.chmod(rel, step["mode"])
    elif op == "symlink":
        fd, name = ws.parent(rel, create=True)
        if ws.is_link(fd, name) and os.readlink(name, dir_fd=fd) == step["link"]:
            return
        tmp = f".{name}.{secrets.token_hex(4)}.coder-es-tmp"
        os.symlink(step["link"], tmp, dir_fd=fd)
        os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)


def _source(step: dict[str, Any], rel: str, up: ConfinedDir, upper: Path) -> Path | None:
    """A file step's source: the command's file at ``rel`` in this transaction's upper
    directory, nothing else (None: gone, moved into place already)."""
    if step["source"] != os.fsdecode(upper / rel):
        raise RefusedPathError(rel, "its source is not in this transaction's upper directory")
    try:
        return up.path(rel)
    except FileNotFoundError:
        return None


def _apply_file(
    step: dict[str, Any],
    path: Path,
    source: Path | None,
    ws: ConfinedDir,
    up: ConfinedDir,
    blobs: BlobStore,
    out: Outcome,
) -> None:
    rel, base, recorded = step["path"], step["base"], bool(step.get("record"))
    # ``path`` names the file through its directory's descriptor (``ConfinedDir.path``); the
    # writes go by that descriptor (the protocol of ``coder_es.workspace.atomic``).
    dir_fd, name = ws.parent(rel, removing=source is None)
    if source is not None and not os.path.lexists(source):
        return  # moved into place by an earlier run of this journal
    ours = step.get("ours")
    disk = _read(path)
    disk_hash = _hash(disk)
    if source is not None and disk_hash == ours:
        _chmod(ws, rel, step["mode"])  # the content is there already (perhaps a mode change)
        return
    if base == UNKNOWN:
        if disk is None and source is None:
            return
        kept = blobs.put(_read(source) or b"") if source is not None else None
        disk_hash = _put(blobs, disk, recorded)
        out.applied.append(Applied(rel, disk_hash, disk_hash, "conflict", kept, recorded))
        return
    if source is not None and disk_hash == base:
        # The common case: nobody else touched the file. Rename the command's file into place
        # (no copy, no extra space), still only if the disk holds what was checked.
        os.chmod(source, step["mode"])
        src_dir, src_name = up.parent(rel)
        if move_into_place_at(dir_fd, name, src_dir, src_name, expected=disk):
            out.applied.append(Applied(rel, base, ours, "direct", ours, recorded))
            out.moved_into.append(path.parent)
            return
    proposed = _read(source) if source is not None else None
    # Imported at the first merge (the three-way merge's modules): a command's sandbox, and a
    # harness, start without them, and a file nobody else touched is renamed into place above.
    from coder_es.workspace.merge_write import merge_at

    try:
        merged = merge_at(
            dir_fd,
            name,
            base,
            proposed,
            blobs,
            name=rel,
            policy="refuse",
            ours_label="command",
            theirs_label="disk",
        )
    except CoderESError:
        # The base is not in the store (an ignored file changed again since the plan): the
        # user's version stays.
        merged = None
    if merged is None or merged.merge.kind == "conflict":
        disk = _read(path) if merged is None else merged.disk
        kept = blobs.put(proposed) if proposed is not None else None
        disk_hash = _put(blobs, disk, recorded)
        out.applied.append(Applied(rel, disk_hash, disk_hash, "conflict", kept, recorded))
        return
    disk, written = merged.disk, merged.written
    if source is not None:
        _chmod(ws, rel, step["mode"])
    if written == disk:
        return
    before = _put(blobs, disk, recorded)
    after = _put(blobs, written, recorded)
    outcome = "direct" if before == base else "merged"
    own = _own_version(blobs, base, disk, proposed) if outcome == "merged" and recorded else None
    out.applied.append(Applied(rel, before, after, outcome, ours, recorded, own))


def _own_version(
    blobs: BlobStore, base: str | None, disk: bytes | None, proposed: bytes | None
) -> str | None:
    """The command's own version of a file the user changed while it ran: its change (from
    the disk it met to its version) applied to what the session knew (``base``), so that the
    user's concurrent bytes (which the command may have read through the overlay) stay the
    user's. When that does not apply cleanly the command's version is taken as it is."""
    from coder_es.workspace.contents import merge_contents

    known = None if base is None else blobs.get(base)
    own = merge_contents(disk, known, proposed)
    data = proposed if own.kind == "conflict" else own.data
    return None if data is None else blobs.put(data, like=base)


def _chmod(ws: ConfinedDir, rel: str, mode: int) -> None:
    with contextlib.suppress(OSError, CoderESError):
        ws.chmod(rel, mode)


# ---------------------------------------------------------------------- recovery


def recover(workspace: Path, blobs: BlobStore) -> list[str]:
    """Finish or drop the transactions a crashed process left behind; returns what was done.

    A transaction whose lock is held belongs to a running command and is left alone. A journal
    this user's coder-es did not seal (``journal``) is never obeyed: it is left where it is and
    reported (a returned line, also logged as a warning), every time until someone removes it.
    Everything is opened from descriptors without following links, like the apply.
    """
    try:
        with ConfinedDir(workspace, guard=False) as ws:
            root_fd, _ = ws.parent(f"{STORE_DIRNAME}/{TX_DIRNAME}/-")
            return _recover_in(workspace, blobs, root_fd)
    except (FileNotFoundError, NotADirectoryError):
        return []
    except RefusedPathError as e:
        line = f"{tx_root(workspace)}: {e.why}; no transaction there was recovered"
        log.warning("%s", line)
        return [line]


def _recover_in(workspace: Path, blobs: BlobStore, root_fd: int) -> list[str]:
    done = []
    for name in sorted(os.listdir(root_fd)):
        try:
            tx_fd = os.open(name, _DIR_FLAGS, dir_fd=root_fd)
        except OSError:
            continue  # not a directory (a link is not followed): nothing of ours
        try:
            line = _recover_one(workspace, blobs, root_fd, tx_fd, name)
        finally:
            os.close(tx_fd)
        if line is not None:
            done.append(line)
    return done


def _recover_one(
    workspace: Path, blobs: BlobStore, root_fd: int, tx_fd: int, name: str
) -> str | None:
    pinned = ConfinedDir.via(root_fd, name)
    try:
        fd = os.open("lock", os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=tx_fd)
    except FileNotFoundError:
        # Being created right now, or a crash before the lock existed (nothing ran).
        with contextlib.suppress(OSError):
            if time.time() - os.fstat(tx_fd).st_mtime > STALE_UNLOCKED_S:
                _remove_tree(pinned)
        return None
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return None  # a live transaction
        try:
            data = _read_journal(tx_fd)
        except OSError as e:
            return _refused(workspace, name, f"unreadable ({e.strerror or e})")
        if data is None:
            _remove_tree(pinned)
            return f"{name}: dropped"
        try:
            steps = sealed.unseal(data, tx=name, workspace=workspace)
        except sealed.RecordRefused as e:
            return _refused(workspace, name, str(e))
        apply_steps(steps, workspace, blobs, tx_root(workspace) / name / "upper")
        _remove_tree(pinned)
        return f"{name}: completed"
    finally:
        os.close(fd)


def _read_journal(tx_fd: int) -> bytes | None:
    try:
        fd = os.open(JOURNAL_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=tx_fd)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "a symbolic link") from e
        raise
    try:
        if not stat_mod.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(sealed.MAX_JOURNAL_BYTES)
    finally:
        os.close(fd)


def _refused(workspace: Path, name: str, why: str) -> str:
    line = (
        f"{tx_root(workspace) / name / JOURNAL_NAME}: a transaction journal coder-es did not "
        f"write ({why}); left alone, nothing in it was applied"
    )
    log.warning("%s", line)
    return line


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


# ---------------------------------------------------------------------- helpers


def _read(path: Path) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None


def _hash(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def _put(blobs: BlobStore, data: bytes | None, recorded: bool) -> str | None:
    if data is None:
        return None
    return blobs.put(data) if recorded else hashlib.sha256(data).hexdigest()


def _make_parents(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)


def _under(rel: str, prefix: str) -> bool:
    return rel == prefix or rel.startswith(prefix + "/")


def _depth(rel: str) -> int:
    return rel.count("/")


def _shown(rel: str) -> str:
    """A path as users see it: bytes that are not UTF-8 escaped."""
    return rel.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _remove_tree(path: Path) -> None:
    def writable(func: Callable[..., Any], p: str, _exc: Any) -> None:
        # overlayfs leaves a mode-000 directory in its work dir. Only directories, never
        # through a link (chmod follows one).
        with contextlib.suppress(OSError):
            for d in (os.path.dirname(p), p):
                if stat_mod.S_ISDIR(os.lstat(d).st_mode):
                    os.chmod(d, 0o700)
        with contextlib.suppress(OSError):
            func(p)

    shutil.rmtree(path, onerror=writable)
