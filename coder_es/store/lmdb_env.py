"""One shared LMDB Environment per store directory per process, and the rules for writing to it.

LMDB allows a single Environment per file per process, so every recorder, factory and blob store on
the same directory shares the one registered here (reference counted; forgotten in a forked child,
where an inherited Environment must not be used).

Durability. The Environment is always opened with ``metasync=False``: a commit then writes and
flushes its data pages and writes (without flushing) the meta page that points to them, which LMDB
guarantees stays consistent after a crash but may lose the last commits: that is the
``crash_consistent`` mode. A ``durable`` writer additionally flushes the file after its commit
(``env.sync(True)``), so the meta page is on disk before ``insert_events`` returns. Doing the second
flush outside LMDB's writer lock lets another writer's commit overlap it; flags are per writer, so
durable and crash-consistent users can share one directory.

Group commit. Recorders write with ``write(..., group=True)``: a thread that finds another
thread's commit in progress queues its job, and the next leader runs every queued job in ONE write
transaction, commits it and flushes it once for all of them. Each job stays all-or-nothing with its
own outcome: grouped jobs check everything that can fail before their first write, so a job that
raises (an IntegrityError) is simply left out of the commit; if the transaction itself fails, each
job is re-run in a transaction of its own. Across processes LMDB's writer lock serialises commits.

A leader first waits briefly for the writers of the group before (they were released moments ago
and usually queue their next batch within ~100 us): never longer than that group's commit and
flush took (2 ms at most), and not at all once that has passed, so a lone writer never waits.
Without it, writers fall into two cohorts that commit alternately (about 1.95 jobs per commit
with 4 threads); with it, 4 writer threads x 50-event batches commit ~4 jobs per commit, and the
throughput went from ~1.8x to ~2.4x SQLite (raw py-lmdb with the 4 batches in one commit:
~3.2x). The writer that completes the group leads it from there (the waiting leader's writer
then waits like the others): no wake-up of the leader on the way to the commit, +5-10% in
interleaved runs. Each writer waits on a lock of its own job, so a group's release is no
broadcast to every waiter.

What durability costs on this machine's disk (bench/store.py reads the block device's own
counters). A durable LMDB commit is two ordered flushes: the data pages, then the meta page that
points at them; SQLite's WAL needs one. Measured per durable single-event append: LMDB 2.01
device flushes and 28.5 KiB written, SQLite 1.02 and 16.9 KiB. The disk also charges per
scattered page: one 4 KiB page + fdatasync took ~210 us, ten scattered pages ~560 us, ten
contiguous ones ~135 us; LMDB's copy-on-write pages are scattered, SQLite's WAL is contiguous.
So a raw py-lmdb commit of the same bytes, with our flags or LMDB's defaults, measured 0.83-1.13x
SQLite in full runs here (1.29x once in a quick run; never 1.3x), and this store stays at
0.87-1.06 of that raw commit.

Not built, and why: a one-flush design (an fdatasync'ed sequential journal, LMDB committed with
``sync=False`` and checkpointed). With sync off LMDB may write a meta page before the pages it
points at, so after a power loss the newest meta can point at garbage; recovering would mean
rewriting LMDB's meta pages to a checkpoint's and pinning every checkpoint's pages with a reader
in every writing process. Writing another engine's internal pages to win a benchmark puts
committed events at risk, which is the one thing this store must not do.

An earlier try at such a wait reached ~3.9 jobs per commit but only ~10% more throughput. What
makes the difference is that the group starts as soon as it is complete: a leader that sleeps
out a timeout loses what sharing saved (measured here: 4 jobs per commit, and slower than not
waiting at all). Leadership is no longer handed on before the flush so that the next commit
overlaps it: the next group's writers are the ones waiting for that flush. The price: while
other jobs loaded this machine (load 3-4 on 2 cores), the old alternating cohorts (a flush
overlapping the next commit) did 1.4-2x better in about a third of the interleaved runs, when
flushes cost as much as commits; equal under synthetic fsync, writeback and CPU hogs.
Switching to overlap when a flush costs about as much as its commit was tried: it landed between
the two and made the grouping depend on the disk's load.
Not kept either: ``writemap=True`` (same single-append rate, batches 9% slower) and a long-lived
reader that makes LMDB allocate pages at the end of the file (single appends ~15% slower, file
growth).

Where a 4-writer group's time goes (the same process, medians over a bench run): the leader's
jobs ~105 us, the LMDB commit ~320 us, the flush ~85 us, and ~150 us from the flush to the next
commit, i.e. the four writers' return and next encoding, one after another under the GIL with a
5-25 us GIL hand-over between them. Raw py-lmdb: puts ~205 us, commit ~275 us, flush ~76 us. All
the Python work runs under the GIL while no I/O is pending, so moving it from the leader into the
writers before they queue only moves it. The gatherer's timed wait ends inside its own group's
commit (the writer that completes the group leads without waking it): a deadline past that
commit removed those wake-ups (31 to 1 per run) but gained under 1% (36 runs each, interleaved:
277.5k vs 278.4k events/s), so it was not kept.

The map grows by itself: a write that hits MDB_MAP_FULL is aborted (so nothing of it is kept), the
map is enlarged while no transaction of this process is active, and the write is re-run. Another
process's growth shows up here as MDB_MAP_RESIZED and is adopted the same way.
"""

from __future__ import annotations

import fcntl
import os
import stat
import struct
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import lmdb
from eventsourcing.persistence import OperationalError

from coder_es.errors import DAMAGED_STORE_ADVICE, StoreError
from coder_es.store.lmdb_codec import TOPICS_DB, TopicTable

FORMAT_KEY = b"format"
FORMAT_VALUE = b"coder_es.lmdb/3"
META_DB = b"coder_es.meta"
DATA_FILE = "data.mdb"
LOCK_FILE = "lock.mdb"

DURABLE = "durable"
CRASH_CONSISTENT = "crash_consistent"
_MiB = 1 << 20

T = TypeVar("T")


class LMDBStoreError(StoreError, OperationalError):
    """An LMDB store cannot be opened, read or written. The message names the store directory.

    It is also eventsourcing's ``OperationalError``, so library code that handles persistence
    failures handles this one too.
    """


@dataclass(frozen=True)
class LMDBSettings:
    path: str
    durable: bool = True
    map_size: int = 64 * _MiB
    """Initial map size in bytes; the map doubles when a write finds it full."""
    max_map_size: int = 1 << 40
    """The map never grows past this (bytes): a write that needs more fails with LMDBStoreError."""
    poll_interval: float = 0.05
    """Seconds between checks for commits made by other processes (for subscriptions)."""
    max_readers: int = 1024

    @classmethod
    def from_env(cls, get: Callable[[str], str | None]) -> LMDBSettings:
        """Read LMDB_PATH, LMDB_DURABILITY, LMDB_MAP_SIZE, LMDB_MAX_MAP_SIZE, LMDB_POLL_INTERVAL,
        LMDB_MAX_READERS through ``get`` (an eventsourcing Environment's or a Mapping's)."""
        path = (get("LMDB_PATH") or "").strip()
        if not path:
            msg = "LMDB_PATH is not set: the LMDB store needs a directory"
            raise LMDBStoreError(msg)
        durability = (get("LMDB_DURABILITY") or DURABLE).strip().lower()
        if durability not in (DURABLE, CRASH_CONSISTENT):
            msg = (
                f"LMDB store {path}: LMDB_DURABILITY={durability!r} is not one of "
                f"{DURABLE!r}, {CRASH_CONSISTENT!r}"
            )
            raise LMDBStoreError(msg)

        def number(key: str, default: float, kind: Callable[[str], float]) -> Any:
            raw = (get(key) or "").strip()
            if not raw:
                return default
            try:
                value = kind(raw)
            except ValueError:
                value = -1
            if value <= 0:
                msg = f"LMDB store {path}: {key}={raw!r} must be a positive number"
                raise LMDBStoreError(msg)
            return value

        map_size = number("LMDB_MAP_SIZE", cls.map_size, int)
        max_map = number("LMDB_MAX_MAP_SIZE", max(cls.max_map_size, map_size), int)
        return cls(
            path=os.path.abspath(path),
            durable=durability == DURABLE,
            map_size=map_size,
            max_map_size=max(max_map, map_size),
            poll_interval=number("LMDB_POLL_INTERVAL", cls.poll_interval, float),
            max_readers=number("LMDB_MAX_READERS", cls.max_readers, int),
        )

    @classmethod
    def from_mapping(cls, env: Mapping[str, str]) -> LMDBSettings:
        return cls.from_env(env.get)


class LMDBStore:
    """The shared Environment of one store directory, with its named databases."""

    def __init__(self, settings: LMDBSettings) -> None:
        self.path = settings.path
        self.settings = settings
        self.max_map_size = settings.max_map_size
        # Held for the Environment's life: scrubbing (``lmdb_scrub``) swaps the data file only
        # when no process holds it.
        self._users_lock = hold_shared(settings.path)
        try:
            self.env = _open_environment(settings)
        except BaseException:
            os.close(self._users_lock)
            raise
        self._refs = 0
        self._closed = False
        self._dbs: dict[bytes, Any] = {}
        self._dbs_lock = threading.Lock()
        # The resize gate: set_mapsize() needs every transaction of this process finished.
        self._gate = threading.Condition()
        self._active = 0
        self._resizing = False
        # Subscriptions: woken at once by commits in this process, by polling for others.
        self._listeners: set[threading.Event] = set()
        self._listeners_lock = threading.Lock()
        self._watcher: threading.Thread | None = None
        # Group commit: writers queue their jobs; one leader commits all queued jobs at once.
        self._queue: list[_Job] = []
        self._queue_lock = threading.Lock()
        self._leading = False
        self._gatherer: _Job | None = None  # the leader's job while it waits for its group
        self._expected = 1  # jobs in the last group: the writers likely to come back
        self._gather_until = 0.0  # how long the next leader may wait for them (monotonic)
        self._topics: TopicTable | None = None
        try:
            self._check_format()
        except BaseException:
            self.env.close()
            os.close(self._users_lock)
            raise

    # -- named databases -----------------------------------------------------------

    def db(self, name: bytes) -> Any:
        found = self._dbs.get(name)
        if found is not None:
            return found
        with self._dbs_lock:
            found = self._dbs.get(name)
            if found is None:
                found = self._run_write(lambda txn: self.env.open_db(name, txn=txn))
                self._dbs[name] = found
            return found

    def topic_table(self) -> TopicTable:
        table = self._topics
        if table is None:
            db = self.db(TOPICS_DB)
            with self._dbs_lock:
                if self._topics is None:
                    self._topics = TopicTable(db)
                table = self._topics
        return table

    def load_topic_names(self) -> None:
        table = self.topic_table()
        with self.read() as txn:
            table.load_names(txn)

    def _check_format(self) -> None:
        def check(txn: Any) -> None:
            names = list(txn.cursor().iternext(values=False))
            if names and META_DB not in names:
                msg = (
                    f"{self.path} is an LMDB environment of another program "
                    "(it has no coder_es format marker); refusing to write to it"
                )
                raise LMDBStoreError(msg)
            meta = self.env.open_db(META_DB, txn=txn)
            found = txn.get(FORMAT_KEY, db=meta)
            if found is None:
                txn.put(FORMAT_KEY, FORMAT_VALUE, db=meta)
            elif found != FORMAT_VALUE:
                msg = (
                    f"LMDB store {self.path} has format {found!r}; this version of coder_es "
                    f"reads {FORMAT_VALUE!r}"
                )
                raise LMDBStoreError(msg)
            self._dbs[META_DB] = meta

        self._run_write(check)
        self.env.sync(True)

    # -- transactions ----------------------------------------------------------------

    def _enter(self) -> None:
        with self._gate:
            while self._resizing:
                self._gate.wait()
            self._active += 1

    def _leave(self) -> None:
        with self._gate:
            self._active -= 1
            if self._resizing and self._active == 0:
                self._gate.notify_all()

    @contextmanager
    def read(self) -> Iterator[Any]:
        """A read-only snapshot transaction."""
        self._enter()
        try:
            try:
                txn = self.env.begin()
            except lmdb.MapResizedError:
                self._leave_and_adopt()
                self._enter()
                txn = self.env.begin()
            try:
                yield txn
            finally:
                txn.abort()
        except lmdb.Error as e:
            raise self.error("read", e) from e
        finally:
            self._leave()

    def write(self, fn: Callable[[Any], T], *, durable: bool, group: bool = False) -> T:
        """Run ``fn(txn)`` in one write transaction and commit it; all or nothing.

        An exception from ``fn`` aborts its writes and propagates. With ``durable`` the commit is
        on disk when this returns.

        With ``group`` the call may share its transaction (and its flushes) with other threads'
        grouped calls queued meanwhile (group commit). ``fn`` must then raise only BEFORE its
        first write: a job that raises is left out without aborting the others, and the
        transaction is committed with the jobs that succeeded. LMDB's nested transactions would
        lift that rule, but each one costs more than the commit it would share.
        """
        if group:
            return self._group_write(fn, durable)
        result = self._run_write(fn)
        if durable:
            self._flush()
        self._wake()
        return result

    def _flush(self) -> None:
        try:
            self.env.sync(True)
        except lmdb.Error as e:
            raise self.error("flush a commit of", e) from e

    def _group_write(self, fn: Callable[[Any], T], durable: bool) -> T:
        job = _Job(fn, durable)
        batch: list[_Job] | None = None
        with self._queue_lock:
            self._queue.append(job)
            if not self._leading:
                self._leading = job.leads = True
                batch = self._group_or_gather(job)
            elif self._gatherer is not None and len(self._queue) >= self._expected:
                # This job completes the group a leader waits for: lead it from here rather
                # than wake that leader (its writer then waits for the group like the others).
                self._gatherer.leads = False
                self._gatherer = None
                job.leads = True
                batch, self._queue = self._queue, []
        try:
            while batch is None:
                with self._queue_lock:
                    gathering = self._gatherer is job
                    timeout = self._gather_until - time.monotonic()
                if gathering:
                    woken = timeout > 0 and job.wake.acquire(True, timeout)
                else:
                    woken = job.wake.acquire()
                with self._queue_lock:
                    if woken and job.done:
                        break
                    if woken and not gathering:  # handed the lead
                        batch = self._group_or_gather(job)
                    elif self._gatherer is job:  # waited long enough
                        self._gatherer = None
                        batch, self._queue = self._queue, []
        except BaseException:
            self._abandon(job)
            raise
        if batch is None:
            return job.outcome()
        started = time.monotonic()
        committed = False
        try:
            self._commit_jobs(batch)
            committed = True
            if any(j.durable for j in batch) and any(j.error is None for j in batch):
                try:
                    self._flush()
                except LMDBStoreError as e:
                    for j in batch:
                        if j.error is None:
                            j.error = e
            self._wake()
        except BaseException as e:
            for j in batch:
                if not committed or j.error is None:
                    j.error = e
            raise
        finally:
            self._finish(batch, started)
        return job.outcome()

    def _group_or_gather(self, job: _Job) -> list[_Job] | None:
        """A new leader's group: every job queued, at once if the writers of the group before
        are all back or waiting for them is over; else None, and ``job`` waits as the gatherer
        (call with the queue lock held). Those writers usually queue their next batch within a
        few dozen microseconds of being released, and sharing one commit (and its two flushes)
        is far cheaper than committing twice; a writer that does not come back costs at most
        the time the last group's commit took."""
        if len(self._queue) >= self._expected or time.monotonic() >= self._gather_until:
            batch, self._queue = self._queue, []
            return batch
        self._gatherer = job
        return None

    def _finish(self, batch: list[_Job], started: float) -> None:
        """Release the group's writers and hand leadership to the first job queued meanwhile."""
        ended = time.monotonic()
        with self._queue_lock:
            self._expected = len(batch)
            self._gather_until = ended + min(ended - started, _MAX_GATHER)
            following = self._pass_lead()
        for j in batch:
            j.done = True
            j.wake.release()
        if following is not None:
            following.wake.release()

    def _pass_lead(self) -> _Job | None:
        """The queued job to lead next (None: nobody leads); call with the queue lock held."""
        following = self._queue[0] if self._queue else None
        self._leading = following is not None
        if following is not None:
            following.leads = True
        return following

    def _abandon(self, job: _Job) -> None:
        """A writer interrupted while it waits: its job leaves the queue unless a leader took
        it already, and the lead, if it had it, passes on, so the other writers are not left
        waiting for a leader that never comes."""
        following = None
        with self._queue_lock:
            if job in self._queue:
                self._queue.remove(job)
            if self._gatherer is job:
                self._gatherer = None
            if job.leads:
                following = self._pass_lead()
        if following is not None:
            following.wake.release()

    def _commit_jobs(self, batch: list[_Job]) -> None:
        def run_all(txn: Any) -> None:
            for j in batch:
                j.error = None
                try:
                    j.result = j.fn(txn)
                except lmdb.Error:
                    raise  # the transaction itself failed: nothing of the group is kept
                except Exception as e:
                    j.error = e

        try:
            self._run_write(run_all)
        except Exception as e:
            if len(batch) == 1:
                batch[0].error = e
                return
            # Whatever failed the shared transaction, give each job its own outcome.
            for j in batch:
                j.error = None
                try:
                    j.result = self._run_write(j.fn)
                except Exception as e2:
                    j.error = e2

    def _run_write(self, fn: Callable[[Any], T]) -> T:
        while True:
            self._enter()
            try:
                txn = self.env.begin(write=True)
                try:
                    result = fn(txn)
                    txn.commit()
                except BaseException:
                    try:
                        txn.abort()
                    except lmdb.Error:
                        pass
                    raise
                return result
            except lmdb.MapFullError:
                grow = True
            except lmdb.MapResizedError:
                grow = False
            except lmdb.Error as e:
                raise self.error("write", e) from e
            finally:
                self._leave()
            self._resize(grow)

    def _leave_and_adopt(self) -> None:
        self._leave()
        self._resize(grow=False)

    def _resize(self, grow: bool) -> None:
        with self._gate:
            while self._resizing:
                self._gate.wait()
            self._resizing = True
            try:
                while self._active:
                    self._gate.wait()
                current = self.env.info()["map_size"]
                if grow:
                    if current >= self.max_map_size:
                        msg = (
                            f"LMDB store {self.path} is full: the map has reached "
                            f"LMDB_MAX_MAP_SIZE ({self.max_map_size} bytes); nothing of the "
                            "failed write was kept"
                        )
                        raise LMDBStoreError(msg)
                    self.env.set_mapsize(min(current * 2, self.max_map_size))
                else:
                    # Another process grew the map: adopt the size recorded in the file.
                    self.env.set_mapsize(0)
            except lmdb.Error as e:
                raise self.error("grow the map of", e) from e
            finally:
                self._resizing = False
                self._gate.notify_all()

    def error(self, action: str, e: lmdb.Error) -> LMDBStoreError:
        return _store_error(action, self.path, e)

    # -- subscriptions ---------------------------------------------------------------

    def listen(self, event: threading.Event) -> None:
        with self._listeners_lock:
            self._listeners.add(event)
            if self._watcher is None or not self._watcher.is_alive():
                self._watcher = threading.Thread(
                    target=self._watch, name=f"lmdb-watch {self.path}", daemon=True
                )
                self._watcher.start()

    def unlisten(self, event: threading.Event) -> None:
        with self._listeners_lock:
            self._listeners.discard(event)

    def _wake(self) -> None:
        if self._listeners:
            for event in list(self._listeners):
                event.set()

    def _watch(self) -> None:
        """Wake subscribers when another process commits (LMDB has no cross-process signal;
        the last transaction id lives in the shared lock file, so polling it is cheap)."""
        last = None
        while True:
            with self._listeners_lock:
                if not self._listeners or self._closed:
                    self._watcher = None
                    return
            try:
                txnid = self.env.info()["last_txnid"]
            except lmdb.Error:
                txnid = None
            if txnid != last:
                if last is not None:
                    self._wake()
                last = txnid
            time.sleep(self.settings.poll_interval)

    def last_txnid(self) -> int:
        return int(self.env.info()["last_txnid"])

    # -- lifetime ----------------------------------------------------------------------

    def close(self) -> None:
        with self._listeners_lock:
            self._closed = True
            self._listeners.clear()
        with self._gate:
            self._resizing = True
            while self._active:
                self._gate.wait()
            self.env.close()
            os.close(self._users_lock)


_MAX_GATHER = 0.002
"""Seconds a group commit's leader waits at most for the writers of the group before."""


class _Job:
    __slots__ = ("done", "durable", "error", "fn", "leads", "result", "wake")

    def __init__(self, fn: Callable[[Any], Any], durable: bool) -> None:
        self.fn = fn
        self.durable = durable
        self.done = False
        self.leads = False
        self.result: Any = None
        self.error: BaseException | None = None
        # Held until the job's writer may go on: its group is done, or it is to lead the next.
        self.wake = threading.Lock()
        self.wake.acquire()

    def outcome(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.result


def _store_error(action: str, path: str, e: BaseException) -> LMDBStoreError:
    reason = getattr(e, "reason", None) or str(e)
    hint = ""
    if isinstance(e, lmdb.InvalidError | lmdb.CorruptedError | lmdb.PageNotFoundError):
        hint = f" (the store is damaged or is not an LMDB store: {DAMAGED_STORE_ADVICE})"
    elif isinstance(e, lmdb.VersionMismatchError):
        hint = " (written by an incompatible LMDB version)"
    elif isinstance(e, lmdb.DiskError) or "No space left" in reason:
        hint = " (the disk is full or failing)"
    elif "closed" in reason:
        hint = " (the store was closed)"
    return LMDBStoreError(f"cannot {action} the LMDB store at {path}: {reason}{hint}")


# LMDB's meta page (lmdb's mdb.c, 64-bit): page header (16 bytes), then MDB_meta: magic, version,
# address, mapsize, two MDB_db records of 48 bytes (the first one's md_pad is the page size),
# last page number, transaction id.
_META = struct.Struct("<IIQQ48s48sQQ")
_MAGIC = 0xBEEFC0DE
_PAGE_HEADER = 16


def check_data_file(data_file: str) -> None:
    """Refuse an LMDB data file that LMDB would map and then crash on with SIGBUS.

    LMDB maps the file and trusts its meta pages: a file cut shorter than the last page the
    newest meta page names is read past its end (SIGBUS, exit 135, no message). This reads the
    two meta pages first and compares. An absent or empty file is a new store (LMDB creates it).
    """
    try:
        st = os.stat(data_file)
    except FileNotFoundError:
        return
    except OSError as e:
        raise LMDBStoreError(f"cannot read the LMDB store file {data_file}: {e.strerror}") from e
    if stat.S_ISDIR(st.st_mode):
        msg = f"the LMDB store file {data_file} is a directory, not a file; {DAMAGED_STORE_ADVICE}"
        raise LMDBStoreError(msg)
    if not stat.S_ISREG(st.st_mode) or st.st_size == 0 or struct.calcsize("P") != 8:
        return
    metas: list[tuple[Any, ...]] = []
    try:
        with open(data_file, "rb") as f:
            first = f.read(_PAGE_HEADER + _META.size)[_PAGE_HEADER:]
            if len(first) == _META.size:
                metas.append(_META.unpack(first))
                psize = _page_size(metas[0])
                if metas[0][0] == _MAGIC and 512 <= psize <= 1 << 16:
                    f.seek(psize + _PAGE_HEADER)
                    second = f.read(_META.size)
                    if len(second) == _META.size:
                        metas.append(_META.unpack(second))
    except OSError as e:
        raise LMDBStoreError(f"cannot read the LMDB store file {data_file}: {e.strerror}") from e
    valid = [m for m in metas if m[0] == _MAGIC]
    if not valid:
        msg = (
            f"the LMDB store file {data_file} is damaged or not an LMDB file (no valid meta "
            f"page; {st.st_size} bytes); {DAMAGED_STORE_ADVICE}"
        )
        raise LMDBStoreError(msg)
    newest = max(valid, key=lambda m: m[7])
    needed = (newest[6] + 1) * _page_size(valid[0])
    if st.st_size < needed:
        msg = (
            f"the LMDB store file {data_file} is truncated: it holds {st.st_size} bytes but its "
            f"last commit needs {needed}; {DAMAGED_STORE_ADVICE}"
        )
        raise LMDBStoreError(msg)


def hold_shared(path: str) -> int:
    """A shared ``flock`` on the store's data file (created empty if missing: LMDB takes an
    empty file for a new store), the file descriptor holding it.

    Every process using the store holds one while its Environment is open; the scrub after
    ``forget`` takes it exclusively, so it never swaps the file under a process writing to it. A
    lock that was waited for may belong to a file swapped meanwhile: then take the new file's.
    (flock locks are independent of the fcntl locks LMDB keeps on ``lock.mdb``.)
    """
    data_file = os.path.join(path, DATA_FILE)
    while True:
        try:
            try:
                fd = os.open(data_file, os.O_RDONLY)
            except FileNotFoundError:
                os.makedirs(path, exist_ok=True)
                if set(os.listdir(path)) - {LOCK_FILE}:
                    # Not a store: _open_environment names the problem.
                    return os.open(os.devnull, os.O_RDONLY)
                fd = os.open(data_file, os.O_RDWR | os.O_CREAT, 0o644)
        except (IsADirectoryError, NotADirectoryError, FileExistsError):
            return os.open(os.devnull, os.O_RDONLY)  # likewise (check_data_file)
        except OSError as e:
            raise LMDBStoreError(f"cannot open the LMDB store at {path}: {e.strerror}") from e
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            if os.fstat(fd).st_ino == os.stat(data_file).st_ino:
                return fd
        except FileNotFoundError:
            pass
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def _page_size(meta: tuple[Any, ...]) -> int:
    return int(struct.unpack_from("<I", meta[4])[0])


def _open_environment(settings: LMDBSettings) -> Any:
    path = settings.path
    if os.path.exists(path) and not os.path.isdir(path):
        msg = f"cannot open the LMDB store at {path}: it is a file, not a directory"
        raise LMDBStoreError(msg)
    try:
        os.makedirs(path, exist_ok=True)
        entries = set(os.listdir(path))
    except OSError as e:
        msg = f"cannot open the LMDB store at {path}: {e.strerror or e}"
        raise LMDBStoreError(msg) from e
    if DATA_FILE not in entries and entries - {LOCK_FILE}:
        msg = (
            f"cannot open the LMDB store at {path}: the directory holds other files and no "
            f"{DATA_FILE}; point LMDB_PATH at an empty or existing store directory"
        )
        raise LMDBStoreError(msg)
    check_data_file(os.path.join(path, DATA_FILE))
    try:
        env = lmdb.open(
            path,
            map_size=settings.map_size,
            max_dbs=256,
            max_readers=settings.max_readers,
            max_spare_txns=16,
            metasync=False,
            sync=True,
            lock=True,
        )
    except lmdb.Error as e:
        raise _store_error("open", path, e) from e
    try:
        # Forget reader slots left behind by killed processes: they would pin old pages.
        env.reader_check()
    except lmdb.Error as e:
        env.close()
        raise _store_error("open", path, e) from e
    return env


# -- the per-process registry --------------------------------------------------------------

_REGISTRY: dict[str, LMDBStore] = {}
_REGISTRY_LOCK = threading.Lock()


def acquire_store(settings: LMDBSettings) -> LMDBStore:
    """The process's LMDBStore for ``settings.path`` (opened on first use); pair with release."""
    key = os.path.realpath(settings.path)
    with _REGISTRY_LOCK:
        store = _REGISTRY.get(key)
        if store is None:
            store = LMDBStore(settings)
            _REGISTRY[key] = store
        store._refs += 1
        return store


def release_store(store: LMDBStore) -> None:
    with _REGISTRY_LOCK:
        store._refs -= 1
        if store._refs > 0:
            return
        key = os.path.realpath(store.path)
        if _REGISTRY.get(key) is store:
            del _REGISTRY[key]
    store.close()


def open_stores() -> list[str]:
    """Directories whose Environment is open in this process (for diagnostics and tests)."""
    with _REGISTRY_LOCK:
        return sorted(_REGISTRY)


def _forget_after_fork() -> None:
    # LMDB forbids using an Environment opened before fork(); the child opens its own.
    global _REGISTRY_LOCK
    _REGISTRY.clear()
    _REGISTRY_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)
