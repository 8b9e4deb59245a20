"""Blob stores on SQL backends: a table beside the events in the same SQLite file or database."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from typing import Any

from coder_es.errors import StoreError
from coder_es.store.blobs import BlobStore


class SQLiteBlobStore(BlobStore):
    def __init__(self, db_path: str) -> None:
        self.db_path = db_path
        try:
            self._conn = sqlite3.connect(db_path, check_same_thread=False, timeout=30)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS coder_es_blobs "
                "(digest TEXT PRIMARY KEY, record BLOB NOT NULL) WITHOUT ROWID"
            )
            self._conn.commit()
        except sqlite3.DatabaseError as e:
            msg = f"cannot open the SQLite blob store at {db_path}: {e}"
            raise StoreError(msg) from e
        self._lock = threading.Lock()

    def _read(self, digest: str) -> bytes | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT record FROM coder_es_blobs WHERE digest = ?", (digest,)
            ).fetchone()
        return None if row is None else bytes(row[0])

    def _write_if_absent(self, digest: str, record: bytes) -> None:
        with self._lock:
            self._conn.execute(
                "INSERT OR IGNORE INTO coder_es_blobs (digest, record) VALUES (?, ?)",
                (digest, record),
            )
            self._conn.commit()

    def _digests(self) -> Iterator[str]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT digest FROM coder_es_blobs ORDER BY digest"
            ).fetchall()
        return (r[0] for r in rows)

    def close(self) -> None:
        self._conn.close()


class PostgresBlobStore(BlobStore):
    def __init__(self, conninfo: dict[str, Any], schema: str = "public") -> None:
        import psycopg
        from psycopg_pool import ConnectionPool

        self._table = f"{schema}.coder_es_blobs" if schema else "coder_es_blobs"
        try:
            self._pool = ConnectionPool(kwargs=conninfo, min_size=1, max_size=4, open=True)
            with self._pool.connection() as conn:
                conn.execute(
                    f"CREATE TABLE IF NOT EXISTS {self._table} "
                    "(digest text PRIMARY KEY, record bytea NOT NULL)"
                )
        except psycopg.Error as e:
            msg = f"cannot open the PostgreSQL blob store ({conninfo.get('dbname')}): {e}"
            raise StoreError(msg) from e

    def _read(self, digest: str) -> bytes | None:
        with self._pool.connection() as conn:
            row = conn.execute(
                f"SELECT record FROM {self._table} WHERE digest = %s", (digest,)
            ).fetchone()
        return None if row is None else bytes(row[0])

    def _write_if_absent(self, digest: str, record: bytes) -> None:
        with self._pool.connection() as conn:
            conn.execute(
                f"INSERT INTO {self._table} (digest, record) VALUES (%s, %s) "
                "ON CONFLICT (digest) DO NOTHING",
                (digest, record),
            )

    def _digests(self) -> Iterator[str]:
        with self._pool.connection() as conn:
            rows = conn.execute(f"SELECT digest FROM {self._table} ORDER BY digest").fetchall()
        return (r[0] for r in rows)

    def close(self) -> None:
        self._pool.close()
