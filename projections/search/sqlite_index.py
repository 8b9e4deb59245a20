"""The search index beside an embedded store: SQLite FTS5 in ``search.sqlite``.

A rebuildable cache (delete the file, or let it be damaged, and the next search indexes again;
an index of another ``FORMAT`` is rebuilt too), so it is written without waiting for the disk
(``synchronous=OFF``: a crash may lose or tear the cache, never the store). It follows the
store's notification log: ``position`` (in the same database, written in the same transaction as
the documents of the events up to it) is the last notification indexed, so every event is
indexed exactly once, and two processes catching up at once skip what the other committed
(``BEGIN IMMEDIATE``, then the position is read again).

**Blocks.** The documents are numbered in the order they are indexed (``docs`` in ``meta``) and
kept in FTS5 tables of ``BLOCK`` documents each (``block0``, ``block1``, ...; the numbering is
the log's order, so a rebuild gives the same blocks). FTS5's bm25 counts, for every search, how
many documents hold each searched phrase (its IDF) by reading the phrase's whole match list: in
one table of a million documents a very common word costs ~50 ms before a single row is ranked.
In a block that count reads at most ``BLOCK`` documents, and merging a block's segments never
rewrites more than a block, which keeps indexing fast as the store grows.

**Stored text.** Each block's FTS5 table is an *external-content* table: the documents' columns
sit in ``content<N>``, their texts in ``chunks`` (consecutive documents' texts deflated together,
``CHUNK`` of them or ``CHUNK_BYTES`` at most), and FTS5 reads them through the view ``plain<N>``
(``chunk_text``, a function every connection registers) for snippets, filters and ``rows``.
FTS5's own copy of the text was two thirds of the file (500 one-line edits: 0.45 of 0.65 MB);
each text deflated alone was 143 KB of the 0.46 MB left, 94 KB in chunks of 16 (issue 36, item 6).
"""

from __future__ import annotations

import itertools
import sqlite3
import zlib
from pathlib import Path

from coder_es.errors import StoreError
from projections.search.documents import MARK_END, MARK_START, Entries
from projections.search.query import WINDOW, Filters, Hit, Query

FORMAT = 4
"""Bumped when what is indexed or how changes: an index of another format is rebuilt."""
BLOCK = 1 << 16
"""Documents per FTS5 table (see the module's docstring)."""
SNIPPET_TOKENS = 16

_META = "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)"
_COLUMNS = "text, session, version, node, kind, ts"


# Each session's id is written once, in ``sessions``; a document names it by number (its 36
# characters in every row were a fifth of the documents' table: 500 one-line edits, ~55 KB).
_SESSIONS = (
    "CREATE TABLE IF NOT EXISTS sessions (id INTEGER PRIMARY KEY, uuid TEXT UNIQUE NOT NULL)"
)


CHUNK = 16
"""Documents whose texts are deflated together (a chunk is rewritten while it fills)."""
CHUNK_BYTES = 64 * 1024
"""A chunk takes no more texts once it holds this many bytes (a big output is rewritten once)."""
_CHUNKS = "CREATE TABLE IF NOT EXISTS chunks (id INTEGER PRIMARY KEY, data BLOB NOT NULL)"
_SEP = "\x00"  # between a chunk's texts: ``clean_text`` keeps NUL out of them


def _block_schema(block: int) -> list[str]:
    return [
        f"CREATE TABLE IF NOT EXISTS content{block} (id INTEGER PRIMARY KEY, chunk INTEGER, "
        "part INTEGER, session INTEGER, version INTEGER, node TEXT, kind TEXT, ts REAL)",
        f"CREATE VIEW IF NOT EXISTS plain{block} AS SELECT c.id AS id, chunk_text(k.data, c.part) "
        "AS text, s.uuid AS session, c.version AS version, c.node AS node, c.kind AS kind, "
        f"c.ts AS ts FROM content{block} AS c JOIN sessions AS s ON s.id = c.session "
        "JOIN chunks AS k ON k.id = c.chunk",
        f"CREATE VIRTUAL TABLE IF NOT EXISTS block{block} USING fts5("
        "text, session UNINDEXED, version UNINDEXED, node UNINDEXED, kind UNINDEXED, "
        f"ts UNINDEXED, content = 'plain{block}', content_rowid = 'id', "
        "tokenize = 'unicode61 remove_diacritics 2')",
    ]


# A document's stored text: b"\x00" + UTF-8, or b"\x01" + raw deflate of it primed with the
# framing tool outputs share (what is written per tag never changes: a new one is a new tag).
_PLAIN, _DEFLATED = b"\x00", b"\x01"
_TEXT_DICT = b"Edited \n--- a/\n+++ b/\n@@ -1,7 +1,7 @@\n edit\nread\nwrite\nbash\n"
_MIN_PACK = 64


def _pack(text: str) -> bytes:
    data = text.encode("utf-8")
    if len(data) >= _MIN_PACK:
        c = zlib.compressobj(6, zlib.DEFLATED, -15, 9, zlib.Z_DEFAULT_STRATEGY, _TEXT_DICT)
        packed = c.compress(data) + c.flush()
        if len(packed) < len(data):
            return _DEFLATED + packed
    return _PLAIN + data


def unpack_text(stored: bytes | str | None) -> str | None:
    """The text ``_pack`` stored (an index is a cache: damage reads as empty text)."""
    if not isinstance(stored, bytes):
        return stored
    try:
        if stored[:1] == _DEFLATED:
            return zlib.decompressobj(-15, _TEXT_DICT).decompress(stored[1:]).decode("utf-8")
        return stored[1:].decode("utf-8")
    except (zlib.error, UnicodeDecodeError):
        return ""


class _ChunkReader:
    """``chunk_text(data, part)``: one text of a chunk. FTS5 reads a document's row for each
    snippet and filtered match, mostly in rowid order: the last chunk read is kept split."""

    def __init__(self) -> None:
        self._data: bytes | None = None
        self._parts: list[str] = []

    def __call__(self, data: bytes | None, part: int | None) -> str:
        if data is None or part is None:
            return ""
        if data != self._data:
            self._parts = (unpack_text(data) or "").split(_SEP)
            self._data = data
        return self._parts[part] if 0 <= part < len(self._parts) else ""


class SQLiteSearchIndex:
    def __init__(self, path: Path | str, *, block: int | None = None) -> None:
        self.path = str(path)
        self.block = block or BLOCK
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
        conn.create_function("unpack_text", 1, unpack_text, deterministic=True)
        conn.create_function("chunk_text", 2, _ChunkReader(), deterministic=True)
        try:
            # Pages that merging FTS5's segments frees go back to the file system at each commit
            # (a new file only: an existing one keeps its mode), not onto a free list that kept
            # ~20% of the file (issue 36, item 6).
            conn.execute("PRAGMA auto_vacuum=FULL")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=OFF")  # a cache: see the module's docstring
            conn.execute("PRAGMA cache_size=-65536")  # 64 MiB: merges stay in memory
            self._conn = conn
            self._setup()
        except sqlite3.DatabaseError:
            conn.close()
            raise
        return conn

    def _setup(self) -> None:
        self._conn.execute(_META)
        self._conn.execute(_SESSIONS)
        self._conn.execute(_CHUNKS)
        if self._meta("format") not in (None, FORMAT) or self._meta("block") not in (
            None,
            self.block,
        ):
            self.clear()
        with self._write():
            self._conn.executemany(
                "INSERT OR IGNORE INTO meta VALUES (?, ?)",
                (("format", FORMAT), ("block", self.block)),
            )

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
            fresh = [docs for n, docs in entries if n > done]
            if not fresh:
                return 0
            count = self._meta("docs") or 0
            number = itertools.count(count + 1)  # each document's rowid: its number
            rows = [
                (next(number), d.text, d.session, d.version, d.node, d.kind, d.timestamp)
                for docs in fresh
                for d in docs
            ]
            self._conn.executemany(
                "INSERT OR IGNORE INTO sessions (uuid) VALUES (?)",
                [(uuid,) for uuid in dict.fromkeys(r[2] for r in rows)],
            )
            numbers = {
                uuid: self._conn.execute(
                    "SELECT id FROM sessions WHERE uuid = ?", (uuid,)
                ).fetchone()[0]
                for uuid in {r[2] for r in rows}
            }
            places = self._chunk([(r[0], r[1]) for r in rows])
            at = 0
            while at < len(rows):  # the rows of each block in one statement
                block = (count + at) // self.block
                end = min(len(rows), (block + 1) * self.block - count)
                for statement in _block_schema(block):
                    self._conn.execute(statement)
                part = rows[at:end]
                self._conn.executemany(
                    f"INSERT INTO content{block} (id, chunk, part, session, version, node, kind, "
                    "ts) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [(r[0], *places[r[0]], numbers[r[2]], *r[3:]) for r in part],
                )
                self._conn.executemany(
                    f"INSERT INTO block{block} (rowid, {_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    part,
                )
                at = end
            self._conn.executemany(
                "INSERT OR REPLACE INTO meta VALUES (?, ?)",
                (("position", entries[-1][0]), ("docs", count + len(rows))),
            )
        return len(fresh)

    def _chunk(self, texts: list[tuple[int, str]]) -> dict[int, tuple[int, int]]:
        """Store ``texts`` (document number, text) in chunks, the last one first filled up;
        returns each document's (chunk, part)."""
        last = self._conn.execute("SELECT id, data FROM chunks ORDER BY id DESC LIMIT 1").fetchone()
        chunk, parts = (
            (0, []) if last is None else (last[0], (unpack_text(last[1]) or "").split(_SEP))
        )
        size = sum(len(p) for p in parts)
        if last is None or len(parts) >= CHUNK or size >= CHUNK_BYTES:
            chunk, parts, size = chunk + 1, [], 0
        places: dict[int, tuple[int, int]] = {}
        changed: dict[int, list[str]] = {}
        for number, text in texts:
            if len(parts) >= CHUNK or size >= CHUNK_BYTES:
                chunk, parts, size = chunk + 1, [], 0
            places[number] = (chunk, len(parts))
            parts = [*parts, text]
            size += len(text)
            changed[chunk] = parts
        self._conn.executemany(
            "INSERT OR REPLACE INTO chunks (id, data) VALUES (?, ?)",
            [(k, _pack(_SEP.join(v))) for k, v in changed.items()],
        )
        return places

    def _blocks(self) -> range:
        count = self._meta("docs") or 0
        return range((count + self.block - 1) // self.block)

    def clear(self) -> None:
        with self._write():
            names = self._conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name GLOB 'block[0-9]*' "
                "AND name NOT GLOB 'block*_*'"
            ).fetchall()
            for (name,) in names:
                self._conn.execute(f"DROP TABLE IF EXISTS {name}")  # faster than deleting rows
            views = self._conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'view' AND name GLOB 'plain[0-9]*'"
            ).fetchall()
            for (name,) in views:
                self._conn.execute(f"DROP VIEW IF EXISTS {name}")
            contents = self._conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name GLOB 'content[0-9]*'"
            ).fetchall()
            for (name,) in contents:
                self._conn.execute(f"DROP TABLE IF EXISTS {name}")
            self._conn.execute("DROP TABLE IF EXISTS docs")  # the single table of FORMAT 1
            self._conn.execute("DROP TABLE IF EXISTS sessions")
            self._conn.execute(_SESSIONS)
            self._conn.execute("DROP TABLE IF EXISTS chunks")
            self._conn.execute(_CHUNKS)
            self._conn.execute("DROP TABLE meta")
            self._conn.execute(_META)
            self._conn.executemany(
                "INSERT INTO meta VALUES (?, ?)", (("format", FORMAT), ("block", self.block))
            )

    def search(self, query: Query, filters: Filters) -> list[Hit]:
        where: list[str] = []
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
        cond = "".join(f" AND {w}" for w in where)
        count = self._meta("docs") or 0
        hits: list[Hit] = []
        # The newest block first, then older ones while fewer than `limit` hits are found: each
        # is ranked on its own (its own IDF), so the hits of a newer block come first.
        for block in reversed(self._blocks()):
            need = filters.limit - len(hits)
            start, newest = block * self.block, min(count, (block + 1) * self.block)
            hits += self._search_block(block, cond, params, start, newest, need)
            if len(hits) >= filters.limit:
                break
        return hits

    def _search_block(
        self, block: int, cond: str, params: list[object], start: int, newest: int, need: int
    ) -> list[Hit]:
        table = f"block{block}"
        # Ranked: the newest WINDOW documents, or back to the `need`-th newest match when the
        # window holds fewer. FTS5 reads a word's matches from a rowid on, so a word present in
        # half the documents is ranked at a bounded cost; finding that match is a scan without
        # ranking (no bm25, no snippet), newest first, that stops at it.
        kth = self._conn.execute(
            f"SELECT rowid FROM {table} WHERE {table} MATCH ?{cond} "
            "ORDER BY rowid DESC LIMIT 1 OFFSET ?",
            (*params, need - 1),
        ).fetchone()
        floor = start if kth is None else max(start, min(newest - WINDOW, int(kth[0]) - 1))
        rows = self._conn.execute(
            f"SELECT session, node, kind, version, ts, snippet({table}, 0, '{MARK_START}', "
            f"'{MARK_END}', '…', {SNIPPET_TOKENS}), rank FROM {table} "
            f"WHERE {table} MATCH ?{cond} AND rowid > ? ORDER BY rank LIMIT ?",
            (*params, floor, need),
        ).fetchall()
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
        out: list[tuple[object, ...]] = []
        for block in self._blocks():
            out += self._conn.execute(
                f"SELECT session, version, node, kind, ts, text FROM block{block}"
            ).fetchall()
        return sorted(out, key=lambda r: (r[0], r[1], r[3], r[2]))

    def close(self) -> None:
        self._conn.close()


class _Transaction:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __enter__(self) -> None:
        self._conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, *_: object) -> None:
        self._conn.execute("COMMIT" if exc_type is None else "ROLLBACK")
