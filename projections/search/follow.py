"""Keep an embedded store's search index current while a process records (``run``, ``chat``,
``acp``, ``serve``), so a search finds a session's events without indexing them first.

``SearchFeed`` follows the application's saves (``CoderApp.save_observers``). A save only hands
over its stored events (a list append under a lock: about a microsecond on the turn's path); a
thread of the feed's own, with its own SQLite connection, indexes them ``DELAY`` seconds later
(so a turn's saves are indexed together, in one transaction, while the model streams or a tool
runs) and once more when the feed is closed, before the application is. When they are the log's
next notifications after the index's position (the usual case: one process recording) they are
indexed as handed over, without reading the store: on the SQLite store a reader makes the next
save wait for it, which cost a turn 4 ms a step in bench/loop.py. Otherwise (another process's
events in between, a log never indexed) the thread runs ``catch_up``, the code a search runs.
Either way ``add`` writes the documents and the new position in one transaction and skips what
another indexer committed, so each event is indexed once. A search still catches up before it
reads (the safety net: events of a process that did not feed the index, a feed cut short).

The index is a rebuildable cache: a failure here never reaches the turn; the first one is
reported once on stderr and the feed stops (the next search catches up). A backlog larger than
``MAX_BACKLOG`` (a store recorded before it was indexed) is left to the first search, which says
it is indexing and shows progress: indexing it here would compete with the turns for the CPU.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable
from typing import Any

from eventsourcing.persistence import Notification

from coder_es.application import CoderApp
from projections.search.index import SearchIndex, catch_up, entries_of, open_index, pending

EMBEDDED = ("lmdb", "sqlite")
"""Backends whose index lives beside the store (popo's is built per search in memory;
PostgreSQL's is kept by ``coder-es project --view search``)."""
DELAY = 0.25
"""Seconds between a save and the catch-up it triggers: the saves meanwhile join it."""
MAX_BACKLOG = 20_000
"""Notifications the feed indexes at once at most (a few seconds of work); more is a store
that was never indexed, which the first search indexes with progress shown."""
CLOSE_TIMEOUT = 30.0
"""Seconds ``close`` waits for the last catch-up (SQLite's own lock timeout)."""


def _report_to_stderr(message: str) -> None:
    print(message, file=sys.stderr)


class SearchFeed:
    """Catches ``app``'s search index up with the log after its saves, off the saving thread."""

    def __init__(
        self,
        app: CoderApp,
        *,
        delay: float = DELAY,
        max_backlog: int = MAX_BACKLOG,
        report: Callable[[str], None] = _report_to_stderr,
    ) -> None:
        self.app = app
        self.delay = delay
        self.max_backlog = max_backlog
        self.report = report
        self.indexed = 0
        """Events this feed indexed (tests, benchmarks)."""
        self.failed = False
        self._stale = threading.Event()
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._saved: list[Notification] = []

    def attach(self) -> SearchFeed:
        self.app.save_observers.append(self.saved)
        return self

    def saved(self, recordings: list[Any]) -> None:
        """A save happened (a save observer): never raises, never waits."""
        if self.failed or self._closing.is_set():
            return
        with self._lock:
            self._saved += [r.notification for r in recordings]
        self.start()
        self._stale.set()

    def start(self) -> SearchFeed:
        """Start the feed's thread, which opens (or creates) the index, if it has not started:
        at the first save, or before it for a caller with time to spare (then opening the index
        is not between that save and ``close``)."""
        if self._thread is None:
            with self._lock:
                if self._thread is None and not self._closing.is_set():
                    self._thread = threading.Thread(
                        target=self._run, name="coder-es search index", daemon=True
                    )
                    self._thread.start()
        return self

    def close(self) -> None:
        """Index what was saved so far, then stop (call it before closing the application)."""
        with self._lock:
            self._closing.set()
            self._stale.set()
            thread = self._thread
        if thread is not None:
            thread.join(CLOSE_TIMEOUT)
        if self.app.save_observers.count(self.saved):
            self.app.save_observers.remove(self.saved)

    def _run(self) -> None:
        index: SearchIndex | None = None
        try:
            index = open_index(self.app)
            while True:
                self._stale.wait()
                self._closing.wait(self.delay)  # the turn's next saves join this catch-up
                self._stale.clear()  # before reading the log: a later save wakes us again
                last = self._closing.is_set()  # close() comes after the saves it must see
                with self._lock:
                    saved, self._saved = self._saved, []
                self.indexed += self._index(index, saved)
                if last:
                    return
        except Exception as e:  # a cache: the turn goes on, the next search catches up
            self.failed = True
            self.report(
                f"coder-es: the search index was not updated ({type(e).__name__}: {e}); "
                "the next search indexes what is missing"
            )
        finally:
            if index is not None:
                with contextlib.suppress(Exception):  # a connection that already failed
                    index.close()

    def _index(self, index: SearchIndex, saved: list[Notification]) -> int:
        """Index the events saved here when they are the log's next ones (nothing else is read:
        on the SQLite store a reader makes the next save wait); else catch up from the log."""
        position = index.position
        fresh = sorted((n for n in saved if n.id > position), key=lambda n: n.id)
        if not fresh:
            return 0
        if fresh[0].id == position + 1 and fresh[-1].id - fresh[0].id == len(fresh) - 1:
            return index.add(entries_of(self.app, fresh))
        # Another process's events in between, or a log never indexed: read it.
        if pending(self.app, index) > self.max_backlog:
            return 0
        return catch_up(self.app, index)


def feed_search_index(app: CoderApp, **kwargs: Any) -> SearchFeed | None:
    """A ``SearchFeed`` for ``app`` (not yet attached), or None for a backend whose index is
    kept elsewhere (see ``EMBEDDED``)."""
    if app.config.backend not in EMBEDDED:
        return None
    return SearchFeed(app, **kwargs)
