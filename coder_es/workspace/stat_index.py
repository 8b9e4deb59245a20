"""Change detection for shell commands: a stat index of the workspace (path -> size, times, hash).

``rescan()`` reports the files created, modified or deleted since the last scan and stores the new
contents as blobs (the old ones were stored when they were scanned), so a rewind can undo a shell
command's side effects as well as the agent's edits.

Cost: one ``lstat`` per known file, plus reading and hashing only the files whose stat changed.
A directory whose own mtime did not change has the same entries as before, so it is not listed
again (nor are its names matched against ``.gitignore``); only changed directories are re-listed.

Racy entries: a file written in the same timestamp tick as the scan that recorded it could be
rewritten with the same size and the same mtime. Like git's "racily clean" entries, any file or
directory whose mtime is within ``racy_window_ns`` of the scan that recorded it is re-checked by
content on the next scan, so such a change is never missed. The window covers the timestamp
granularity: 50 ms where the file system keeps sub-second times (the kernel's coarse clock ticks
every 1-10 ms), 2 s where every mtime seen is a whole second (FAT, some network file systems).

The index is a cache: it lives in memory and can be rebuilt from the disk at any time.
"""

from __future__ import annotations

import hashlib
import os
import stat as stat_mod
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coder_es.store.blobs import BlobStore
from coder_es.workspace.ignore import IgnoreMatcher

FINE_RACY_WINDOW_NS = 50_000_000
COARSE_RACY_WINDOW_NS = 2_000_000_000


@dataclass(frozen=True, slots=True)
class FileChange:
    """One file changed outside the agent's edits. ``before``/``after`` are content hashes,
    None for "did not exist"."""

    path: str
    before: str | None
    after: str | None

    @property
    def kind(self) -> str:
        if self.before is None:
            return "created"
        if self.after is None:
            return "deleted"
        return "modified"

    def as_event(self) -> dict[str, Any]:
        """The ``{path, before, after}`` form of ``ToolCallCompleted.files_changed``."""
        return {"path": self.path, "before": self.before, "after": self.after}


@dataclass(slots=True)
class _FileEntry:
    size: int
    mtime_ns: int
    ctime_ns: int
    ino: int
    hash: str
    racy: bool


@dataclass(slots=True)
class _DirEntry:
    mtime_ns: int
    ino: int
    files: list[str]  # names of the (non-ignored) regular files
    dirs: list[str]  # names of the (non-ignored) subdirectories
    racy: bool


class StatIndex:
    """A snapshot of the stat information and content hashes of the workspace's files.

    Symlinks are not indexed (restoring them as regular files would be wrong); ignored paths
    (``.gitignore``, ``.git``, ``.coder-es``) are skipped.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        blobs: BlobStore,
        *,
        ignore: IgnoreMatcher | None = None,
        racy_window_ns: int | None = None,
    ) -> None:
        self.root = Path(root)
        self._root_s = os.path.join(os.fspath(root), "")
        self.blobs = blobs
        self.ignore = ignore or IgnoreMatcher(self.root)
        # Until the build has seen the file system's timestamps, assume the coarse case.
        self.racy_window_ns = COARSE_RACY_WINDOW_NS if racy_window_ns is None else racy_window_ns
        self.files: dict[str, _FileEntry] = {}
        self._dirs: dict[str, _DirEntry] = {}
        self.hashed = 0  # files read and hashed by the last scan (for benchmarks and tests)
        self._scan("", build=True)
        if racy_window_ns is None:
            fine = any(e.mtime_ns % 1_000_000_000 for e in self.files.values())
            self.racy_window_ns = FINE_RACY_WINDOW_NS if fine else COARSE_RACY_WINDOW_NS

    def hashes(self) -> dict[str, str]:
        """path -> content hash of every indexed file."""
        return {path: entry.hash for path, entry in self.files.items()}

    def rescan(self) -> list[FileChange]:
        """The files created, modified or deleted since the last scan, sorted by path."""
        return self._scan("", build=False)

    # ------------------------------------------------------------------ scanning

    def _scan(self, start: str, *, build: bool) -> list[FileChange]:
        started = time.time_ns()
        self.hashed = 0
        changes: list[FileChange] = []
        seen_files: set[str] = set()
        seen_dirs: set[str] = set()
        stack = [start]
        while stack:
            dir_rel = stack.pop()
            listing = self._listing(dir_rel, started)
            if listing is None:
                continue
            seen_dirs.add(dir_rel)
            prefix = f"{dir_rel}/" if dir_rel else ""
            for name in listing.files:
                rel = prefix + name
                if self._check_file(rel, started, changes):
                    seen_files.add(rel)
            stack.extend(prefix + name for name in listing.dirs)
        for rel in [p for p in self.files if p not in seen_files]:
            old = self.files.pop(rel)
            # Still there but no longer listed: it became ignored, which is not a deletion.
            if not _is_regular_file(self._root_s + rel):
                changes.append(FileChange(rel, old.hash, None))
        for dir_rel in [d for d in self._dirs if d not in seen_dirs]:
            del self._dirs[dir_rel]
        if build:
            return []
        for change in changes:
            if change.path.rsplit("/", 1)[-1] == ".gitignore":
                self._ignore_rules_changed(change.path.rpartition("/")[0])
        changes.sort(key=lambda c: c.path)
        return changes

    def _listing(self, dir_rel: str, started: int) -> _DirEntry | None:
        path = self._root_s + dir_rel
        try:
            st = os.lstat(path)
        except OSError:
            self._forget_dir(dir_rel)
            return None
        if not stat_mod.S_ISDIR(st.st_mode):
            self._forget_dir(dir_rel)
            return None
        known = self._dirs.get(dir_rel)
        if (
            known is not None
            and not known.racy
            and known.mtime_ns == st.st_mtime_ns
            and known.ino == st.st_ino
        ):
            return known
        if known is None or known.mtime_ns != st.st_mtime_ns:
            # A new or changed .gitignore here changes what is listed below.
            self.ignore.forget(dir_rel)
        files: list[str] = []
        dirs: list[str] = []
        try:
            with os.scandir(path) as it:
                for entry in it:
                    rel = f"{dir_rel}/{entry.name}" if dir_rel else entry.name
                    if entry.is_dir(follow_symlinks=False):
                        if not self.ignore.is_ignored(rel, True):
                            dirs.append(entry.name)
                    elif entry.is_file(follow_symlinks=False) and not self.ignore.is_ignored(
                        rel, False
                    ):
                        files.append(entry.name)
        except OSError:
            self._forget_dir(dir_rel)
            return None
        listing = _DirEntry(
            st.st_mtime_ns,
            st.st_ino,
            sorted(files),
            sorted(dirs),
            racy=st.st_mtime_ns >= started - self.racy_window_ns,
        )
        self._dirs[dir_rel] = listing
        return listing

    def _ignore_rules_changed(self, dir_rel: str) -> None:
        # An edited .gitignore does not touch its directory's mtime: re-list the whole subtree
        # next time, so newly un-ignored files show up as created.
        self.ignore.forget(dir_rel)
        prefix = f"{dir_rel}/" if dir_rel else ""
        for name, listing in self._dirs.items():
            if name == dir_rel or name.startswith(prefix):
                listing.racy = True

    def _forget_dir(self, dir_rel: str) -> None:
        self._dirs.pop(dir_rel, None)

    def _check_file(self, rel: str, started: int, changes: list[FileChange]) -> bool:
        """Bring the entry of ``rel`` up to date, appending its change; False if it is gone."""
        path = self._root_s + rel
        old = self.files.get(rel)
        try:
            st = os.lstat(path)
        except OSError:
            return False  # deleted since the listing: the caller's sweep reports it
        if not stat_mod.S_ISREG(st.st_mode):
            return False
        if (
            old is not None
            and not old.racy
            and old.size == st.st_size
            and old.mtime_ns == st.st_mtime_ns
            and old.ctime_ns == st.st_ctime_ns
            and old.ino == st.st_ino
        ):
            return True
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            return False
        self.hashed += 1
        digest = hashlib.sha256(data).hexdigest()
        if old is None or old.hash != digest:
            # The blob is stored before the change is reported: a rewind can rely on it.
            self.blobs.put(data, like=old.hash if old is not None else None)
        self.files[rel] = _FileEntry(
            st.st_size,
            st.st_mtime_ns,
            st.st_ctime_ns,
            st.st_ino,
            digest,
            racy=st.st_mtime_ns >= started - self.racy_window_ns,
        )
        if old is None:
            changes.append(FileChange(rel, None, digest))
        elif old.hash != digest:
            changes.append(FileChange(rel, old.hash, digest))
        return True


def _is_regular_file(path: str) -> bool:
    try:
        return stat_mod.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False
