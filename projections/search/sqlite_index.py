"""The search index beside an embedded store: SQLite FTS5 in ``search.sqlite``.

A rebuildable cache (delete the file, or let it be damaged, and the next search indexes again;
an index of another ``FORMAT`` is rebuilt too). It follows the store's
notification log: ``position`` (in the same database, written in the same transaction as the
documents of the events up to it) is the last notification indexed, so every event is indexed
exactly once, and two processes catching up at once skip what the other committed
(``BEGIN IMMEDIATE``, then the position is read again).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from coder_es.errors import StoreError
from projections.search.documents import MARK_END, MARK_START, Entries
from projections.search.query import WINDOW, Filters, Hit, Query

FORMAT = 1
"""Bumped when what is indexed changes: an index of another format is rebuilt."""
SNIPPET_TOKENS = 16

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)",
    "CREATE VIRTUAL TABLE IF NOT EXISTS docs USING fts5("
    "text, session UNINDEXED, version UNINDEXED, node UNINDEXED, kind UNINDEXED, "
    "ts UNINDEXED, tokenize = 'unicode61 remove_diacritics 2')",
)


class SQLiteSearchIndex:
    def __init__(self, path: Path | str) -> None:
        self.path = str(path)
        try:
            self._conn = self._open()
        except sqlite3.DatabaseError:
            if self.path == ":memory:":
                raise
            # A damaged cache (a torn copy, garbage): drop it, the log rebuilds it.
            for suffix in ("", "-wal", "-shm"):
                Path(self.path + suffix).unlink(missing_ok=True)
            try:
                self._conn = self._open()
            except sqlite3.DatabaseError as e:
                msg = f"cannot open the search index {self.path}: {e}"
                raise StoreError(msg) from e

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA cache_size=-65536")  # 64 MiB: merges stay in memory
            self._conn = conn
            self._setup()
        except sqlite3.DatabaseError:
            conn.close()
            raise
        return conn

    def _setup(self) -> None:
        for statement in _SCHEMA:
            self._conn.execute(statement)
        if self._meta("format") not in (None, FORMAT):
            self.clear()
        with self._write():
            self._conn.execute("INSERT OR IGNORE INTO meta VALUES ('format', ?)", (FORMAT,))

    def _meta(self, key: str) -> int | None:
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else int(row[0])

    def _write(self) -> _Transaction:
        return _Transaction(self._conn)

    @property
    def position(self) -> int:
        """The last notification id indexed (0: none)."""
        return self._meta("position") or 0

    def add(self, entries: Entries) -> int:
        """Index each notification's documents and move the position to the last, atomically;
        notifications another process indexed meanwhile are skipped. Returns how many were new."""
        if not entries:
            return 0
        with self._write():
            done = self._meta("position") or 0
            fresh = [(n, docs) for n, docs in entries if n > done]
            self._conn.executemany(
                "INSERT INTO docs (text, session, version, node, kind, ts) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (
                    (d.text, d.session, d.version, d.node, d.kind, d.timestamp)
                    for _, docs in fresh
                    for d in docs
                ),
            )
            if fresh:
                self._conn.execute(
                    "INSERT OR REPLACE INTO meta VALUES ('position', ?)", (fresh[-1][0],)
                )
        return len(fresh)

    def clear(self) -> None:
        with self._write():
            self._conn.execute("DROP TABLE IF EXISTS docs")  # faster than deleting every row
            self._conn.execute("DROP TABLE meta")
            for statement in _SCHEMA:
                self._conn.execute(statement)
            self._conn.execute("INSERT INTO meta VALUES ('format', ?)", (FORMAT,))

    def search(self, query: Query, filters: Filters) -> list[Hit]:
        where: list[str] = ["docs MATCH ?"]
        params: list[object] = [query.fts5()]
        if filters.session is not None:
            where.append("session = ?")
            params.append(filters.session)
        if filters.kind is not None:
            where.append("kind = ?")
            params.append(filters.kind)
        if filters.since is not None:
            where.append("ts >= ?")
            params.append(filters.since)
        cond = " AND ".join(where)
        sql = (
            "SELECT session, node, kind, version, ts, "
            f"snippet(docs, 0, '{MARK_START}', '{MARK_END}', '…', {SNIPPET_TOKENS}), bm25(docs) "
            f"FROM docs WHERE {cond} AND rowid > ? ORDER BY rank LIMIT ?"
        )
        # FTS5 keeps the rows in the shadow table docs_content, where max(id) is one b-tree seek.
        newest = self._conn.execute("SELECT max(id) FROM docs_content").fetchone()[0] or 0
        # The most recent WINDOW documents first, then 8x more, until `limit` hits are found:
        # FTS5 reads a word's matches from a rowid on, so a word present in half the store is
        # ranked among a bounded number of documents, and a rare one costs a few cheap passes.
        window = WINDOW
        while True:
            floor = max(0, newest - window)
            rows = self._conn.execute(sql, (*params, floor, filters.limit)).fetchall()
            if len(rows) >= filters.limit or floor == 0:
                break
            window *= 8
        return [
            Hit.marked(
                raw,
                session=session,
                node=node,
                kind=kind,
                version=int(version),
                timestamp=float(ts),
                score=-float(rank),
            )
            for session, node, kind, version, ts, raw, rank in rows
        ]

    def rows(self) -> list[tuple[object, ...]]:
        """Every document in a stable order (tests compare an incremental index with a rebuild)."""
        return list(
            self._conn.execute(
                "SELECT session, version, node, kind, ts, text FROM docs "
                "ORDER BY session, version, kind, node"
            )
        )

    def close(self) -> None:
        self._conn.close()


class _Transaction:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __enter__(self) -> None:
        self._conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, *_: object) -> None:
        self._conn.execute("COMMIT" if exc_type is None else "ROLLBACK")
