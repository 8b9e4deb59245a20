"""Scrubbing a store: what deleted records left behind in its files is given back, not kept.

Deleting a record does not remove its bytes: LMDB is copy-on-write (the old page is only marked
free, and stays in ``data.mdb`` until reused), SQLite keeps freed pages and write-ahead-log frames,
PostgreSQL keeps dead tuples until VACUUM. ``forget`` deletes a session's wrapped data key; this
makes the deletion hold for the store's bytes too (the test reads every byte of the directory).

- LMDB: a compacting copy (``env.copy(compact=True)``: live pages only, renumbered) is written
  beside ``data.mdb`` and renamed over it. The swap is safe against a kill at any point: until the
  rename the old file is the store (a leftover ``.scrub-*`` directory is removed next time); the
  copy is flushed before the rename, the rename is atomic, and the directory is flushed after it.
  It is safe against other processes by a lock: every process holds a shared ``flock`` on
  ``data.mdb`` while its Environment is open (``lmdb_env.hold_shared``); the scrub takes it
  exclusively without waiting, so it never swaps the file under a process that could write to
  the old one. Busy: ``StoreBusyError`` (nothing changed; the next ``forget`` scrubs again).
- SQLite: ``secure_delete`` + VACUUM + a checkpoint that truncates the write-ahead log.
- PostgreSQL: VACUUM FULL of the view table (new files; the write-ahead log keeps its copies
  until recycled, which no client can force: documented in docs/DESIGN.md).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from coder_es.store.views import StoreBusyError

if TYPE_CHECKING:
    from coder_es.store.config import StoreConfig

_SCRUB_PREFIX = ".scrub-"


@dataclass(frozen=True)
class ScrubResult:
    bytes_before: int
    bytes_after: int
    """Of the store's files (0 and 0 for a database server or memory)."""

    @property
    def given_back(self) -> int:
        return max(0, self.bytes_before - self.bytes_after)


def _size(paths: list[Path]) -> int:
    total = 0
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            total += path.stat().st_size
    return total


def scrub_store(config: StoreConfig) -> ScrubResult:
    """Remove the bytes of deleted records from ``config``'s store. The store must not be open
    in this process (close the application first). ``StoreBusyError`` when another process has
    it open (nothing changed)."""
    if config.backend == "lmdb":
        files = [config.lmdb_dir / "data.mdb"]
        before = _size(files)
        scrub_lmdb(str(config.lmdb_dir))
        return ScrubResult(before, _size(files))
    if config.backend == "sqlite":
        from coder_es.store.views import SQLiteViewStore

        base = config.sqlite_file
        files = [base, base.with_name(base.name + "-wal")]
        before = _size(files)
        views = SQLiteViewStore(str(base))
        try:
            views.scrub()
        finally:
            views.close()
        return ScrubResult(before, _size(files))
    if config.backend == "postgres":
        from coder_es.store.views import PostgresViewStore

        pg = PostgresViewStore(config.postgres_conninfo(), schema=config.postgres_schema())
        try:
            pg.scrub()
        finally:
            pg.close()
    return ScrubResult(0, 0)


def scrub_lmdb(path: str) -> None:
    """Replace ``path``'s ``data.mdb`` by a compacting copy of itself (see the module doc)."""
    import lmdb

    from coder_es.store.lmdb_env import DATA_FILE, open_stores

    if os.path.realpath(path) in open_stores():
        msg = f"the LMDB store at {path} is still open in this process: it was not scrubbed"
        raise StoreBusyError(msg)
    data_file = os.path.join(path, DATA_FILE)
    for leftover in Path(path).glob(f"{_SCRUB_PREFIX}*"):
        shutil.rmtree(leftover, ignore_errors=True)  # a scrub killed before its rename
    fd = os.open(data_file, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            msg = (
                f"another process has the store at {path} open: its freed pages were not "
                "scrubbed (run `coder-es forget` again once it is closed)"
            )
            raise StoreBusyError(msg) from None
        if os.fstat(fd).st_ino != os.stat(data_file).st_ino:
            msg = f"the store at {path} was scrubbed meanwhile by another process"
            raise StoreBusyError(msg)
        work = tempfile.mkdtemp(prefix=_SCRUB_PREFIX, dir=path)
        try:
            env = lmdb.open(path, readonly=True, max_dbs=256, lock=True)
            try:
                env.copy(work, compact=True)
            finally:
                env.close()
            copy = os.path.join(work, DATA_FILE)
            copy_fd = os.open(copy, os.O_RDONLY)
            try:
                os.fsync(copy_fd)
            finally:
                os.close(copy_fd)
            os.chmod(copy, os.stat(data_file).st_mode & 0o7777)
            os.replace(copy, data_file)
            dir_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    finally:
        os.close(fd)
