"""Bringing many files to a node's contents at once: what a rewind, checkout or fork does to disk.

Each file goes through the same three-way merge as an agent's write (base = the session's own last
content of the file, theirs = the disk now, ours = the target): a file the user has not touched is
replaced, a user's edit that does not overlap survives, an overlapping one leaves the file as the
user has it (a conflict). What makes thousands of files cost about what ``git checkout`` costs is
doing that in phases, each batched:

1. read every file and compare its hash with the base: where the disk still holds what the session
   knew (the common case) no merge is needed, the target is written as it is;
2. fetch every blob needed (targets, and bases of the files to merge) in one store read, merge
   the few files the user edited, and store the user's contents and the merges in one write;
3. stage every new content as a temporary file beside its target (its names noted first in one
   record in the scratch directory, ``atomic.note_batch``, so that after a kill the next start
   removes them), flush them all with one ``syncfs``, then install each with the
   compare-and-swap check and rename of ``workspace.atomic`` (under the file's lock), and flush
   the directory entries once more.

Every path is reached through ``coder_es.workspace.confined``: from the workspace's directory
descriptor, one component at a time, no link followed, never into ``.coder-es/``, ``.git/hooks/``
or ``.git/config``; a path that does not lead where its name says is an error for that file.

A file that changed between the read and its rename (a user saving during the restoration) is
not overwritten: it goes through the single-file merge-and-write loop (``merge_onto_disk``), which
merges the user's new content, retrying under the file's lock. Without ``syncfs`` (not Linux)
every staged file and directory is flushed one by one, as a single write does.
"""

from __future__ import annotations

import errno
import itertools
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from coder_es.errors import BlobNotFoundError, CoderESError
from coder_es.store.blobs import BlobStore, digest_of
from coder_es.workspace.atomic import (
    forget_batch,
    install_at,
    note_batch,
    read_at,
    read_current,
    remove_at,
    stage_at,
    sync_filesystem_of,
    temporary_names,
    umask_now,
)
from coder_es.workspace.confined import ConfinedDir, RefusedPathError
from coder_es.workspace.errors import WriteConflictError
from coder_es.workspace.sandbox import Sandbox

# What a restoration did to one path.
UNCHANGED = "unchanged"  # the disk already held the target content
RESTORED = "restored"  # the disk held what the session knew: replaced by the target
MERGED = "merged"  # the user's edit and the target merged cleanly
CONFLICT = "conflict"  # the user's edit overlaps: the file is left as the user has it
ERROR = "error"  # the file could not be read or written: left as it is

OURS_LABEL = "session"
THEIRS_LABEL = "disk"
NOT_STORED = "the session's copy of this file is not in the store: cannot merge"

Progress = Callable[[int, int], None]
"""Called with (files settled, files to restore) as a restoration goes; the last call has both
equal."""

# The file system calls of big restorations run on a few threads: replacing a file frees the old
# one's inode, and on a journaling file system each such call mostly waits on the journal, so
# overlapping them divides the time (measured in bench/rewind.py). Threads only for this many
# files each at least.
WORKERS = 8
PER_WORKER = 16
CHUNKS_PER_WORKER = 4  # a few, so that a thread finishing early takes another

# From this many files on, one ``syncfs`` flushes them rather than one ``fsync`` each.
SYNCFS_FROM = 32

A = TypeVar("A")
B = TypeVar("B")

# (path, base, target): what ``FileStates.restore_plan`` lists.
PlanEntry = tuple[str, str | None, str | None]


@dataclass(frozen=True)
class FileRestoration:
    path: str
    outcome: str
    base: str | None
    disk: str | None
    target: str | None
    result: str | None
    detail: str = ""

    @property
    def problem(self) -> bool:
        return self.outcome in (CONFLICT, ERROR)

    def to_json(self) -> dict[str, Any]:
        record = {
            "path": self.path,
            "outcome": self.outcome,
            "base": self.base,
            "disk": self.disk,
            "target": self.target,
            "result": self.result,
        }
        if self.detail:
            record["detail"] = self.detail
        return record


@dataclass
class _File:
    """One path on its way through the phases. The file is named by its directory's descriptor
    (held by the run's ``ConfinedDir``) and its last name: no path is resolved again."""

    path: str
    base: str | None
    target: str | None
    dir_fd: int | None  # None: a directory above it is missing (made when it is written)
    name: str
    disk: bytes | None
    disk_hash: str | None
    mode: int | None = None  # the permission bits of the file read
    want: bytes | None = None
    write: bytes | None = None  # what the file gets (None: deleted)
    result: FileRestoration | None = None  # the outcome once the write is installed
    tmp: str | None = None  # the temporary file's name, beside the file (in ``dir_fd``)

    @property
    def where(self) -> Path | None:
        """The file as a path (through its directory's descriptor), for the per-file calls."""
        return None if self.dir_fd is None else ConfinedDir.via(self.dir_fd, self.name)


def restore_files(
    sandbox: Sandbox,
    plan: Sequence[PlanEntry],
    blobs: BlobStore,
    *,
    progress: Progress | None = None,
    scratch: Path | None = None,
    sides: Mapping[str, str | None] | None = None,
) -> list[FileRestoration]:
    """Bring every path of ``plan`` to its target (see the module docstring), in plan order.
    ``scratch``: where temporary files go (``coder_es.workspace.atomic.scratch_dir``).
    ``sides``: for paths left in conflict, the session's side; a disk that equals it holds no
    user bytes (the user took the session's version: the conflict is resolved by content), so
    it is the base instead of the plan's."""
    workers = min(WORKERS, len(plan) // PER_WORKER)
    with ThreadPoolExecutor(workers) if workers > 1 else nullcontext() as pool:
        run = _Run(sandbox, blobs, len(plan), progress, pool, scratch, sides or {})
        try:
            return run.restore(plan)
        finally:
            run.discard_staged()
            run.close()


class _Run:
    def __init__(
        self,
        sandbox: Sandbox,
        blobs: BlobStore,
        total: int,
        progress: Progress | None,
        pool: ThreadPoolExecutor | None,
        scratch: Path | None,
        sides: Mapping[str, str | None],
    ) -> None:
        self.sandbox, self.blobs, self.scratch = sandbox, blobs, scratch
        self.sides = sides
        self.total, self.progress = total, progress
        self.pool = pool
        self.outcomes: dict[str, FileRestoration] = {}
        self.staged: list[_File] = []
        self.confined = ConfinedDir(sandbox.root)
        self.outside: ConfinedDir | None = None  # "/", for paths recorded outside the root
        self.names = temporary_names()
        self.umask = umask_now()
        self.batch: Path | None = None  # the record of the staged files (``atomic.note_batch``)

    def close(self) -> None:
        self.confined.close()
        if self.outside is not None:
            self.outside.close()

    def place(self, path: str, *, create: bool = False) -> tuple[int, str]:
        """``path``'s directory descriptor and last name, through ``ConfinedDir`` (see the
        module docstring); the last name is never followed if it is a link (``O_NOFOLLOW``)."""
        if not os.path.isabs(path):
            return self.confined.parent(path, create=create)
        # Recorded outside the workspace (allowed when it was written): its real path then.
        root = self.sandbox.root
        if Path(path).is_relative_to(root):
            return self.confined.parent(Path(path).relative_to(root).as_posix(), create=create)
        if self.outside is None:
            self.outside = ConfinedDir("/", guard=False)
        return self.outside.parent(path.lstrip("/"), create=create)

    def each(self, fn: Callable[[A], B], items: Iterable[A]) -> Iterator[B]:
        """``fn`` over ``items``, results in order; on the pool's threads when there is one.
        ``fn`` does file system calls only (they release the GIL) and never raises. The pool
        gets the items in a few chunks per thread, not one task each: a task per file costs a
        future, a lock and a wake-up of a thread, as much as the file's own calls."""
        if self.pool is None:
            return map(fn, items)
        listed = list(items)
        size = max(PER_WORKER, -(-len(listed) // (WORKERS * CHUNKS_PER_WORKER)))
        chunks = [listed[i : i + size] for i in range(0, len(listed), size)]
        done = self.pool.map(lambda chunk: [fn(item) for item in chunk], chunks)
        return itertools.chain.from_iterable(done)

    def settle(self, outcome: FileRestoration) -> None:
        self.outcomes[outcome.path] = outcome
        if self.progress is not None:
            try:
                self.progress(len(self.outcomes), self.total)
            except Exception:
                # A failing display must not stop a restoration halfway, with files changed
                # and nothing recorded: it just gets no more calls.
                self.progress = None

    def restore(self, plan: Sequence[PlanEntry]) -> list[FileRestoration]:
        files = self.read(plan)
        contents = self.blobs.get_many(
            {f.target for f in files if f.target is not None}
            | {f.base for f in files if f.base is not None and f.disk_hash != f.base}
        )
        writes = [f for f in files if self.decide(f, contents)]
        self.store_contents(files, writes)
        self.write(writes)
        return [self.outcomes[path] for path, _base, _target in plan]

    # ---------------------------------------------------------------- phase 1: read the disk

    def read(self, plan: Sequence[PlanEntry]) -> list[_File]:
        files = []
        for found in self.each(self.read_one, plan):
            if isinstance(found, _File):
                files.append(found)
            else:
                self.settle(found)
        return files

    def read_one(self, entry: PlanEntry) -> _File | FileRestoration:
        path, base, target = entry
        dir_fd: int | None = None
        name, disk, mode = "", None, None
        try:
            try:
                dir_fd, name = self.place(path)
            except FileNotFoundError:
                pass  # a directory above it is missing: so is the file
            else:
                disk, mode = read_at(dir_fd, name)
        except OSError as e:
            if e.errno == errno.ELOOP:
                why = RefusedPathError(path, "is a symbolic link, not the file recorded")
                return FileRestoration(path, ERROR, base, None, target, None, str(why))
            return FileRestoration(path, ERROR, base, None, target, None, str(e))
        except CoderESError as e:
            return FileRestoration(path, ERROR, base, None, target, None, str(e))
        disk_hash = digest(disk)
        if disk_hash == target:
            return FileRestoration(path, UNCHANGED, base, target, target, target)
        if path in self.sides and disk_hash == self.sides[path]:
            base = disk_hash  # the session's own side of a conflict: no user bytes to keep
        return _File(path, base, target, dir_fd, name, disk, disk_hash, mode)

    # ---------------------------------------------------------------- phase 2: decide

    def decide(self, f: _File, contents: dict[str, bytes]) -> bool:
        """Settle ``f`` or give it the content to write; True when there is one."""
        if f.target is not None:
            try:
                f.want = self.content(f.target, contents)
            except CoderESError as e:
                self.settle(self.failed(f, e))
                return False
        if f.disk_hash == f.base:
            # The disk holds what the session knew: no merge, the target as it is.
            f.write = f.want
            f.result = FileRestoration(f.path, RESTORED, f.base, f.disk_hash, f.target, f.target)
            return True
        base: bytes | None = None
        if f.base is not None:
            try:
                base = self.content(f.base, contents)
            except BlobNotFoundError:
                self.settle(self.left(f, NOT_STORED))
                return False
            except CoderESError as e:
                self.settle(self.failed(f, e))
                return False
        # Imported here: `tree` and `diff` import this module and never merge (start-up time).
        from coder_es.workspace.contents import merge_contents

        merge = merge_contents(
            base, f.disk, f.want, ours_label=OURS_LABEL, theirs_label=THEIRS_LABEL
        )
        if merge.kind == "theirs":
            self.settle(
                FileRestoration(f.path, UNCHANGED, f.base, f.disk_hash, f.target, f.disk_hash)
            )
            return False
        if merge.kind == "conflict":
            self.settle(self.left(f, f"overlapping edit ({merge.reason or 'text'})"))
            return False
        f.write = merge.data
        outcome = RESTORED if merge.kind == "ours" else MERGED
        f.result = FileRestoration(
            f.path, outcome, f.base, f.disk_hash, f.target, digest(merge.data)
        )
        return True

    def content(self, digest: str, contents: dict[str, bytes]) -> bytes:
        """A blob of the batch read; one it left out is read alone, to raise why."""
        found = contents.get(digest)
        return self.blobs.get(digest) if found is None else found

    def left(self, f: _File, why: str) -> FileRestoration:
        """A conflict: the file stays as the user has it."""
        return FileRestoration(f.path, CONFLICT, f.base, f.disk_hash, f.target, f.disk_hash, why)

    def store_contents(self, files: list[_File], writes: list[_File]) -> None:
        """One store write for every content the restoration found or made that may be new: the
        user's versions (recorded before anything happens to the files) and the merges."""
        items = [(f.disk, f.base) for f in files if f.disk is not None and f.disk_hash != f.base]
        items += [(f.write, f.target) for f in writes if f.write is not None and f.write != f.want]
        if items:
            self.blobs.put_many(items)

    # ---------------------------------------------------------------- phase 3: write

    def write(self, writes: list[_File]) -> None:
        creating = [f for f in writes if f.write is not None]
        for f in creating:
            f.tmp = "." + self.names()
        if creating and self.scratch is not None:
            # Noted before any exists: a kill at any point leaves them to ``clean_scratch``.
            self.batch = note_batch(self.scratch, [self.noted(f) for f in creating])
        self.staged = creating
        for f, error in zip(creating, self.each(self.stage_one, creating), strict=True):
            if error is not None:
                self.settle(self.failed(f, error))
        _flush([(f.dir_fd, f.tmp) for f in creating if f.dir_fd is not None and f.tmp is not None])
        ready = [f for f in writes if f.path not in self.outcomes]
        changed_dirs: list[tuple[int, str | None]] = []
        moved = []
        for f, done in zip(ready, self.each(self.install_one, ready), strict=True):
            if isinstance(done, OSError):
                self.settle(self.failed(f, done))
            elif done and f.result is not None:
                if f.dir_fd is not None:
                    changed_dirs.append((f.dir_fd, None))
                self.settle(f.result)
            else:
                moved.append(f)
        for f in moved:
            # The file changed since it was read: merge again, one file at a time.
            assert f.where is not None
            self.settle(
                restore_one(f.where, f.path, f.base, f.target, self.blobs, f.want, self.scratch)
            )
        _flush(changed_dirs)

    def noted(self, f: _File) -> str:
        """``f``'s temporary file as ``note_batch`` records it (where ``place`` finds it)."""
        assert f.tmp is not None
        path = f.path
        if os.path.isabs(path) and Path(path).is_relative_to(self.sandbox.root):
            path = Path(path).relative_to(self.sandbox.root).as_posix()
        return os.path.join(os.path.dirname(path), f.tmp)

    def stage_one(self, f: _File) -> OSError | CoderESError | None:
        """Write ``f``'s new content to its temporary file, in the file's own directory: the
        rename that installs it then stays in one directory (no cross-directory rename, which
        the kernel serialises for the whole file system), and the files are created in many
        small directories rather than in one that grows by thousands of names."""
        assert f.write is not None and f.tmp is not None
        try:
            if f.dir_fd is None:
                f.dir_fd, f.name = self.place(f.path, create=True)
            stage_at(f.dir_fd, f.tmp, f.write, f.mode, umask=self.umask)
        except (OSError, CoderESError) as e:
            return e
        return None

    def install_one(self, f: _File) -> bool | OSError:
        """The compare-and-swap of one file; False when the disk no longer holds ``f.disk``."""
        try:
            if f.write is None:
                return f.dir_fd is None or remove_at(f.dir_fd, f.name, f.disk)
            assert f.dir_fd is not None and f.tmp is not None
            tmp, f.tmp = f.tmp, None
            return install_at(f.dir_fd, f.name, f.dir_fd, tmp, expected=f.disk)
        except OSError as e:
            return e

    def failed(self, f: _File, e: Exception) -> FileRestoration:
        """The file could not be restored: left as it is (``disk``), with the reason."""
        return FileRestoration(f.path, ERROR, f.base, f.disk_hash, f.target, None, str(e))

    def discard_staged(self) -> None:
        """Remove the temporary files a failure left (none after a finished run), then the
        batch's record."""
        for f in self.staged:
            if f.tmp is not None and f.dir_fd is not None:
                try:
                    os.unlink(f.tmp, dir_fd=f.dir_fd)
                except FileNotFoundError:
                    pass
        forget_batch(self.batch)
        self.batch = None


def _flush(places: list[tuple[int, str | None]]) -> None:
    """Make durable the staged files ``(directory descriptor, name)`` or, with no name, these
    directories' entries: one ``syncfs`` per file system, or one flush each for a few of them
    (``syncfs`` also waits for whatever else is pending on the file system) or where there is
    no ``syncfs``."""
    if not places:
        return
    by_device: dict[int, int] = {}
    if len(places) >= SYNCFS_FROM:
        for d in {d for d, _name in places}:
            by_device.setdefault(os.fstat(d).st_dev, d)
    if by_device and all(sync_filesystem_of(d) for d in by_device.values()):
        return
    for d, name in dict.fromkeys(places):
        if name is None:
            with suppress(OSError):  # not every platform flushes a directory
                os.fsync(d)
            continue
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=d)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def digest(data: bytes | None) -> str | None:
    return None if data is None else digest_of(data)


def restore_one(
    where: Path,
    path: str,
    base: str | None,
    target: str | None,
    blobs: BlobStore,
    want: bytes | None = None,
    scratch: Path | None = None,
) -> FileRestoration:
    """Bring one file to ``target`` through the merge-and-write loop, retrying under its lock
    while the disk keeps moving (``want``: the target's content, when already read)."""
    from coder_es.workspace.merge_write import merge_onto_disk

    try:
        if want is None and target is not None:
            want = blobs.get(target)
        try:
            step = merge_onto_disk(
                where,
                base,
                want,
                blobs,
                name=path,
                policy="refuse",
                ours_label=OURS_LABEL,
                theirs_label=THEIRS_LABEL,
                scratch=scratch,
            )
        except (WriteConflictError, BlobNotFoundError) as e:
            now = digest(read_current(where))
            why = (
                "the file kept changing during the restoration"
                if isinstance(e, WriteConflictError)
                else NOT_STORED
            )
            return FileRestoration(path, CONFLICT, base, now, target, now, why)
        disk_hash = digest(step.disk)
        kind = step.merge.kind
        if kind == "theirs":
            return FileRestoration(path, UNCHANGED, base, disk_hash, target, disk_hash)
        if kind == "conflict":
            why = f"overlapping edit ({step.merge.reason or 'text'})"
            return FileRestoration(path, CONFLICT, base, disk_hash, target, disk_hash, why)
        written = step.written
        result = None if written is None else blobs.put(written, like=target)
        outcome = RESTORED if kind == "ours" else MERGED
        return FileRestoration(path, outcome, base, disk_hash, target, result)
    except (OSError, CoderESError) as e:
        return FileRestoration(path, ERROR, base, None, target, None, str(e))
