"""``verify --all`` split across processes: each checks a range of the notification log.

A worker walks its range of notification ids and, per session met there, summarises the run of
events it saw as a ``Segment``: first version and the hash it links to, last version and its hash,
whether every link inside held, and the hash at the session's anchor version if it passed it. The
parent stitches each session's segments in log order (segment n+1 must start at the version after
segment n's last and link to its hash; the first segment starts at version 1 on the genesis hash).

This pass only answers "is every chain intact?". A session whose segments do not stitch cleanly is
not diagnosed here: ``verify_store`` then runs its exact sequential pass, whose reports (which
event was modified, deleted, inserted, moved) are the reference. Damage is rare; speed matters for
the intact case, which is every day's case.

Workers are fresh interpreters (an LMDB environment must not cross a fork) that open the store
themselves from the application's ``StoreConfig`` and environment: LMDB, SQLite and PostgreSQL all
let several processes read at once. The in-memory ``popo`` backend has nothing to share.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    import subprocess

    from eventsourcing.sqlite import SQLiteApplicationRecorder

# pickle, subprocess, tempfile and eventsourcing.sqlite are imported where used: export and
# verify of one session never start workers, and an LMDB store never needs sqlite3 (start-up).

from coder_es.audit.blobrefs import REF_KINDS, blob_refs
from coder_es.audit.fastlink import FastLinker
from coder_es.domain.chain import GENESIS
from coder_es.errors import StoreError

BATCH = 5000
REF_TOPIC_ENDINGS = tuple(f".{kind}" for kind in sorted(REF_KINDS))
PARALLEL_MIN_EVENTS = 200_000
"""Below this, starting worker processes (about half a second) costs more than it saves."""


@dataclass(frozen=True)
class Segment:
    """One session's events within one range of the log, summarised."""

    session: str
    first_version: int
    first_prev: str | None
    last_version: int
    last_hash: str
    events: int
    intact: bool
    """Versions consecutive and every event linked to the one before it, inside the range."""
    anchored_hash: str | None
    """The chain hash at the session's anchor version, when this range holds that version."""


@dataclass(frozen=True)
class BlobRef:
    digest: str
    session: str
    version: int
    what: str


@dataclass(frozen=True)
class RangeSummary:
    segments: tuple[Segment, ...]
    refs: tuple[BlobRef, ...]
    """Blob references in log order (empty unless blobs are checked)."""
    events: int


def scan_range(
    app: Any,
    linker: FastLinker,
    start: int,
    stop: int | None,
    anchors: Mapping[str, int],
    check_blobs: bool,
) -> RangeSummary:
    """Summarise notifications ``start..stop`` (inclusive; ``None``: to the end of the log)."""
    # Per session: [session, first_v, first_prev, last_v, last_hash, events, intact, anchored].
    open_: dict[Any, list[Any]] = {}
    refs: list[BlobRef] = []
    events = 0
    session_str = linker.decoder.session_str
    last_id: Any = None
    seg: list[Any] = []
    for batch in read_pages(app, start, stop):
        if check_blobs:
            links = [_link_and_refs(linker, stored, refs) for stored in batch]
        else:
            links = linker.links(batch)
        for stored, (chain_hash, prev) in zip(batch, links, strict=True):
            version = stored.originator_version
            # A session's events mostly come in runs: look its segment up once per run.
            if stored.originator_id is not last_id:
                last_id = stored.originator_id
                found = open_.get(last_id)
                if found is None:
                    seg = open_[last_id] = [
                        session_str(last_id),
                        version,
                        prev,
                        version - 1,
                        prev,
                        0,
                        True,
                        None,
                    ]
                else:
                    seg = found
            if version != seg[3] + 1 or prev != seg[4]:
                seg[6] = False
            seg[3] = version
            seg[4] = chain_hash
            seg[5] += 1
            if anchors.get(seg[0]) == version:
                seg[7] = chain_hash
        events += len(batch)
    return RangeSummary(tuple(Segment(*s) for s in open_.values()), tuple(refs), events)


def read_pages(app: Any, start: int, stop: int | None) -> Iterator[Sequence[Any]]:
    """The notifications ``start..stop`` in pages, as ``select_notifications`` gives them."""
    recorder = app.recorder
    # A SQLite recorder exists only once eventsourcing.sqlite has been imported.
    sqlite = sys.modules.get("eventsourcing.sqlite")
    if sqlite is not None and isinstance(recorder, sqlite.SQLiteApplicationRecorder):
        yield from _sqlite_pages(recorder, start, stop)
        return
    while True:
        batch = recorder.select_notifications(start=start, limit=BATCH, stop=stop)
        yield batch
        if len(batch) < BATCH:
            return
        start = batch[-1].id + 1


class _Row:
    """A notification as the chain walk reads it (the attributes of ``Notification``)."""

    __slots__ = ("id", "originator_id", "originator_version", "state", "topic")

    def __init__(self, row: Any, originator_id: Any) -> None:
        self.id, _, self.originator_version, self.topic, self.state = row
        self.originator_id = originator_id


def _sqlite_pages(
    recorder: SQLiteApplicationRecorder, start: int, stop: int | None
) -> Iterator[list[_Row]]:
    """eventsourcing's SQLite recorder builds a UUID per row, which costs more than reading the
    row: here each session's id is built once. Same table, same rows, same order."""
    statement = (
        f"SELECT rowid, originator_id, originator_version, topic, state "
        f"FROM {recorder.events_table_name} WHERE rowid>=? AND rowid<=? ORDER BY rowid LIMIT ?"
    )
    high = (1 << 63) - 1 if stop is None else stop
    ids: dict[str, Any] = {}
    while True:
        with recorder.datastore.transaction(commit=False) as c:
            c.execute(statement, (start, high, BATCH))
            rows = c.fetchall()
        page = []
        for row in rows:
            raw = row[1]
            oid = ids.get(raw)
            if oid is None:
                if len(ids) > 4096:
                    ids.clear()
                oid = ids[raw] = recorder.convert_originator_id(raw)
            page.append(_Row(tuple(row), oid))
        yield page
        if len(page) < BATCH:
            return
        start = page[-1].id + 1


def _link_and_refs(linker: FastLinker, stored: Any, refs: list[BlobRef]) -> tuple[str, str | None]:
    if not stored.topic.endswith(REF_TOPIC_ENDINGS):
        return linker.link(stored)
    event = linker.decode(stored)
    refs.extend(
        BlobRef(digest, event.session, event.version, what) for digest, what in blob_refs(event)
    )
    return event.chain_hash, event.prev_hash


@dataclass(frozen=True)
class Stitched:
    """A session whose segments joined into one intact chain from version 1."""

    session: str
    events: int
    last_version: int
    last_hash: str


def stitch(
    summaries: list[RangeSummary], anchor_of: Callable[[str], tuple[int, str] | None]
) -> tuple[list[Stitched], set[str], int]:
    """(sessions found intact, sessions that need the exact pass, events) from the ranges in log
    order. ``anchor_of(session)`` is the session's anchored (version, head), if any."""
    state: dict[str, list[Any]] = {}  # session -> [last_version, last_hash, events, anchored]
    broken: set[str] = set()
    events = 0
    for summary in summaries:
        events += summary.events
        for seg in summary.segments:
            before = state.get(seg.session)
            last_version, last_hash = (0, GENESIS) if before is None else before[:2]
            if (
                not seg.intact
                or seg.first_version != last_version + 1
                or seg.first_prev != last_hash
            ):
                broken.add(seg.session)
            anchored = seg.anchored_hash
            count = seg.events
            if before is not None:
                anchored = anchored or before[3]
                count += before[2]
            state[seg.session] = [seg.last_version, seg.last_hash, count, anchored]
    intact: list[Stitched] = []
    for session, (last_version, last_hash, count, anchored) in state.items():
        if session in broken:
            continue
        anchor = anchor_of(session)
        if anchor is not None and (last_version < anchor[0] or anchored != anchor[1]):
            broken.add(session)  # truncated or rewritten since anchored: the exact pass names it
            continue
        intact.append(Stitched(session, count, last_version, last_hash))
    return intact, broken, events


# ---------------------------------------------------------------------------- processes


@dataclass(frozen=True)
class RangeJob:
    """What a worker process is asked to do (sent pickled on its stdin)."""

    config: Any
    env: dict[str, str]
    start: int
    stop: int
    anchors: dict[str, int]
    check_blobs: bool


def run_job(job: RangeJob) -> RangeSummary:
    from coder_es.application import CoderApp

    app = CoderApp(job.config, env=job.env)
    try:
        return scan_range(
            app, FastLinker(app.mapper), job.start, job.stop, job.anchors, job.check_blobs
        )
    finally:
        app.close()


def worker_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on every platform
        return os.cpu_count() or 1


def can_split(app: Any) -> bool:
    """Whether worker processes can open this application's store on their own."""
    from coder_es.application import CoderApp

    config = getattr(app, "config", None)
    # A subclass may decode differently (its own transcodings): only the plain app is rebuilt.
    return type(app) is CoderApp and config is not None and config.backend != "popo"


def ranges(last_id: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous inclusive id ranges covering 1..last_id."""
    size = -(-last_id // parts)
    return [(first, min(first + size - 1, last_id)) for first in range(1, last_id + 1, size)]


def scan_parallel(
    app: Any, last_id: int, anchors: Mapping[str, int], check_blobs: bool, workers: int
) -> list[RangeSummary]:
    """The summaries of 1..last_id in log order: this process scans the first range while
    ``workers - 1`` child processes scan the others.

    Children are plain ``python -m coder_es.audit.segments`` processes rather than
    multiprocessing ones: those re-import the caller's ``__main__`` (a script without a
    ``__name__`` guard would run again in each), and a forked LMDB environment is unusable."""
    import pickle
    import subprocess
    import tempfile

    parts = ranges(last_id, workers)
    env = {k: v for k, v in app.env.items() if isinstance(v, str)}
    with ExitStack() as stack:
        children: list[tuple[subprocess.Popen[bytes], IO[bytes]]] = []
        for first, last in parts[1:]:
            job = RangeJob(app.config, env, first, last, dict(anchors), check_blobs)
            errors = stack.enter_context(tempfile.TemporaryFile())
            child = stack.enter_context(
                subprocess.Popen(
                    [sys.executable, "-m", "coder_es.audit.segments"],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=errors,
                    env=_child_environ(),
                )
            )
            # On the way out, an unfinished child is stopped (before Popen's exit waits for it).
            stack.callback(_stop, child)
            children.append((child, errors))
            assert child.stdin is not None
            child.stdin.write(pickle.dumps(job))
            child.stdin.close()
        first, last = parts[0]
        out = [scan_range(app, FastLinker(app.mapper), first, last, anchors, check_blobs)]
        for child, log in children:
            assert child.stdout is not None
            data = child.stdout.read()
            if child.wait() != 0:
                log.seek(0)
                text = log.read().decode(errors="replace").strip().splitlines()
                msg = f"a verify worker failed: {text[-1] if text else child.returncode}"
                raise StoreError(msg)
            summary = pickle.loads(data)
            if not isinstance(summary, RangeSummary):
                raise StoreError("a verify worker returned something else than a range summary")
            out.append(summary)
        return out


def _stop(child: subprocess.Popen[bytes]) -> None:
    if child.poll() is None:
        child.kill()


def _child_environ() -> dict[str, str]:
    """This environment, with the directory coder_es is imported from first on the path (it
    may be a checkout the caller put on ``sys.path`` rather than an installed package)."""
    root = str(Path(__file__).resolve().parents[2])
    environ = dict(os.environ)
    environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, environ.get("PYTHONPATH", "")) if p)
    return environ


def _main() -> None:
    # Run as __main__, this file's classes would pickle as __main__.X: use the imported module's.
    import pickle

    from coder_es.audit import segments

    job = pickle.loads(sys.stdin.buffer.read())
    sys.stdout.buffer.write(pickle.dumps(segments.run_job(job)))


if __name__ == "__main__":
    _main()
