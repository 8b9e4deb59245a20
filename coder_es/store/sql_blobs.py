"""Blob stores on SQL backends: a table beside the events in the same SQLite file or database."""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterator, Mapping
from typing import Any

from coder_es.store.blobs import BlobStore
from coder_es.store.sql_tables import open_postgres_table, open_sqlite_table

# Digests per ``IN (...)`` query: below SQLite's default limit of bound parameters.
BATCH = 500


class SQLiteBlobStore(BlobStore):
    def __init__(self, db_path: str) -> None:
        self.db_path = db_path
        self._conn = open_sqlite_table(
            db_path,
            "(digest TEXT PRIMARY KEY, record BLOB NOT NULL) WITHOUT ROWID",
            table="coder_es_blobs",
            what="blob store",
        )
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

    def _read_many(self, digests: Collection[str]) -> dict[str, bytes]:
        keys = list(digests)
        found: dict[str, bytes] = {}
        with self._lock:
            for start in range(0, len(keys), BATCH):
                chunk = keys[start : start + BATCH]
                marks = ",".join("?" * len(chunk))
                rows = self._conn.execute(
                    f"SELECT digest, record FROM coder_es_blobs WHERE digest IN ({marks})", chunk
                ).fetchall()
                found.update((d, bytes(r)) for d, r in rows)
        return found

    def _write_many(self, records: Mapping[str, bytes]) -> None:
        with self._lock:
            self._conn.executemany(
                "INSERT OR IGNORE INTO coder_es_blobs (digest, record) VALUES (?, ?)",
                records.items(),
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
        self._table = f"{schema}.coder_es_blobs" if schema else "coder_es_blobs"
        self._pool = open_postgres_table(
            conninfo,
            "(digest text PRIMARY KEY, record bytea NOT NULL)",
            table=self._table,
            what="blob store",
        )

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

    def _read_many(self, digests: Collection[str]) -> dict[str, bytes]:
        with self._pool.connection() as conn:
            rows = conn.execute(
                f"SELECT digest, record FROM {self._table} WHERE digest = ANY(%s)",
                (list(digests),),
            ).fetchall()
        return {d: bytes(r) for d, r in rows}

    def _write_many(self, records: Mapping[str, bytes]) -> None:
        with self._pool.connection() as conn, conn.cursor() as cur:
            cur.executemany(
                f"INSERT INTO {self._table} (digest, record) VALUES (%s, %s) "
                "ON CONFLICT (digest) DO NOTHING",
                list(records.items()),
            )

    def _digests(self) -> Iterator[str]:
        with self._pool.connection() as conn:
            rows = conn.execute(f"SELECT digest FROM {self._table} ORDER BY digest").fetchall()
        return (r[0] for r in rows)

    def close(self) -> None:
        self._pool.close()
