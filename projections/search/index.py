"""Keep a search index up to date with the store's log, and open the right engine for a store.

The index follows the notification log (every session's events in commit order): ``catch_up``
reads the notifications after the index's position, turns each stored event into its documents
(``documents``) and adds them with the new position in one transaction. Called before every
search, it makes the index current with whatever was appended since; a rebuild (``rebuild``) is
the same from position 0, so both give the same rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from coder_es.errors import CoderESError, UsageError
from projections.search.documents import Entries, StoredBlob, documents
from projections.search.query import Filters, Hit, Query

if TYPE_CHECKING:
    from eventsourcing.persistence import Notification

    from coder_es.application import CoderApp

INDEX_FILE = "search.sqlite"
BATCH = 1000

Progress = Callable[[int, int], None]
"""Called with (events indexed so far, events to index in all)."""


class SearchIndex(Protocol):
    @property
    def position(self) -> int: ...

    def add(self, entries: Entries) -> int: ...

    def search(self, query: Query, filters: Filters) -> list[Hit]: ...

    def rows(self) -> list[tuple[Any, ...]]: ...

    def clear(self) -> None: ...

    def close(self) -> None: ...


def open_index(app: CoderApp) -> SearchIndex:
    """The engine for the app's backend: FTS5 in ``<store>/search.sqlite`` for the embedded
    backends (in memory for popo), tsvector + GIN in the database for postgres."""
    backend = app.config.backend
    if backend == "postgres":
        from projections.search.postgres_index import PostgresSearchIndex

        return PostgresSearchIndex(app.config)
    from projections.search.sqlite_index import SQLiteSearchIndex

    if backend == "popo":
        return SQLiteSearchIndex(":memory:")
    return SQLiteSearchIndex(app.config.path / INDEX_FILE)


def stored_blob(app: CoderApp) -> Callable[[str], bytes | None]:
    """The stored (redacted) form of a blob: never the sealed content."""

    def read(digest: str) -> bytes | None:
        try:
            return app.blobs.stored_form(digest)
        except CoderESError:
            return None  # a missing or damaged blob: its event's own text is still indexed

    return read


def pending(app: CoderApp, index: SearchIndex) -> int:
    """How many notifications the index has yet to read."""
    return max(0, (app.recorder.max_notification_id() or 0) - index.position)


def entries_of(
    app: CoderApp, notifications: Sequence[Notification], blob: StoredBlob | None = None
) -> Entries:
    """Each notification's id with the documents of its event."""
    read = blob or stored_blob(app)
    return [(n.id, documents(app.mapper.to_domain_event(n), read)) for n in notifications]


def catch_up(
    app: CoderApp, index: SearchIndex, *, batch: int = BATCH, progress: Progress | None = None
) -> int:
    """Index the events appended since the index's position; returns how many were read."""
    total = pending(app, index)
    blob = stored_blob(app)
    done = 0
    while True:
        start = index.position + 1
        page = app.recorder.select_notifications(start=start, limit=batch)
        if not page:
            return done
        index.add(entries_of(app, page, blob))
        done += len(page)
        if progress is not None:
            progress(done, max(total, done))


def rebuild(app: CoderApp, index: SearchIndex, *, progress: Progress | None = None) -> int:
    """Drop everything and index the whole log again."""
    index.clear()
    return catch_up(app, index, progress=progress)


def search(
    app: CoderApp,
    index: SearchIndex,
    text: str,
    filters: Filters | None = None,
    *,
    progress: Progress | None = None,
) -> list[Hit]:
    """Catch up, then the best hits for ``text`` (see ``Query`` for the syntax)."""
    query = Query.parse(text)
    if query.empty:
        raise UsageError("the query has no words to search for")
    catch_up(app, index, progress=progress)
    return index.search(query, filters or Filters())
