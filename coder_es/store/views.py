"""Checkpoints of projections: small mutable records beside the events, always rebuildable.

A projection that must open fast (the conversation tree of a 100k-event session) stores its state
here with the position it reached (``ViewRecord.position``: the session version or notification id
it has processed). Losing a checkpoint only costs a rebuild from the events; the log stays the only
source of truth.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from coder_es.errors import StoreError
from coder_es.store.sql_tables import open_postgres_table, open_sqlite_table


@dataclass(frozen=True)
class ViewRecord:
    position: int
    data: bytes


class ViewStore(ABC):
    @abstractmethod
    def get(self, key: str) -> ViewRecord | None: ...

    @abstractmethod
    def put(self, key: str, record: ViewRecord) -> None: ...

    @abstractmethod
    def delete(self, key: str) -> None: ...

    @abstractmethod
    def keys(self, prefix: str) -> list[str]:
        """Every key starting with ``prefix``, sorted."""

    def get_many(self, keys: Sequence[str]) -> dict[str, ViewRecord]:
        """The records of ``keys`` that exist (one read where the backend allows)."""
        found = {}
        for key in keys:
            record = self.get(key)
            if record is not None:
                found[key] = record
        return found

    @abstractmethod
    def batch(
        self,
        puts: Mapping[str, ViewRecord],
        deletes: Sequence[str] = (),
        guards: Sequence[Guard] = (),
    ) -> bool:
        """Write ``puts`` and delete ``deletes`` in ONE transaction, only if every guard holds
        (else nothing is written); whether it was written. The sealed-secret store relies on it:
        rotating the wrapping key re-wraps every session's key at once, and a key created
        meanwhile by another process names the wrapping key it was made under (a guard)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release backend resources."""


@dataclass(frozen=True)
class Guard:
    """A condition of ``ViewStore.batch``: record ``key`` is at ``position`` (None: absent)."""

    key: str
    position: int | None


class MemoryViewStore(ViewStore):
    def __init__(self) -> None:
        self._records: dict[str, ViewRecord] = {}

    def get(self, key: str) -> ViewRecord | None:
        return self._records.get(key)

    def put(self, key: str, record: ViewRecord) -> None:
        self._records[key] = record

    def delete(self, key: str) -> None:
        self._records.pop(key, None)

    def keys(self, prefix: str) -> list[str]:
        return sorted(k for k in list(self._records) if k.startswith(prefix))

    def batch(
        self,
        puts: Mapping[str, ViewRecord],
        deletes: Sequence[str] = (),
        guards: Sequence[Guard] = (),
    ) -> bool:
        for guard in guards:
            found = self._records.get(guard.key)
            if (None if found is None else found.position) != guard.position:
                return False
        for key in deletes:
            self._records.pop(key, None)
        self._records.update(puts)
        return True


class SQLiteViewStore(ViewStore):
    def __init__(self, db_path: str) -> None:
        self._conn = open_sqlite_table(
            db_path,
            "(key TEXT PRIMARY KEY, position INTEGER NOT NULL, data BLOB NOT NULL)",
            table="coder_es_views",
            what="view store",
        )
        self._lock = threading.Lock()

    def get(self, key: str) -> ViewRecord | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT position, data FROM coder_es_views WHERE key = ?", (key,)
            ).fetchone()
        return None if row is None else ViewRecord(row[0], bytes(row[1]))

    def put(self, key: str, record: ViewRecord) -> None:
        with self._lock:
            self._conn.execute(
                "INSERT OR REPLACE INTO coder_es_views (key, position, data) VALUES (?, ?, ?)",
                (key, record.position, record.data),
            )
            self._conn.commit()

    def delete(self, key: str) -> None:
        with self._lock:
            self._conn.execute("DELETE FROM coder_es_views WHERE key = ?", (key,))
            self._conn.commit()

    def keys(self, prefix: str) -> list[str]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT key FROM coder_es_views WHERE substr(key, 1, ?) = ? ORDER BY key",
                (len(prefix), prefix),
            ).fetchall()
        return [str(r[0]) for r in rows]

    def get_many(self, keys: Sequence[str]) -> dict[str, ViewRecord]:
        found = {}
        with self._lock:
            for at in range(0, len(keys), 500):
                chunk = list(keys[at : at + 500])
                marks = ",".join("?" * len(chunk))
                for key, position, data in self._conn.execute(
                    f"SELECT key, position, data FROM coder_es_views WHERE key IN ({marks})",
                    chunk,
                ):
                    found[str(key)] = ViewRecord(position, bytes(data))
        return found

    def batch(
        self,
        puts: Mapping[str, ViewRecord],
        deletes: Sequence[str] = (),
        guards: Sequence[Guard] = (),
    ) -> bool:
        with self._lock:
            conn = self._conn
            conn.commit()
            # IMMEDIATE: the guards are read under the write lock, so they still hold at commit.
            conn.execute("BEGIN IMMEDIATE")
            try:
                for guard in guards:
                    row = conn.execute(
                        "SELECT position FROM coder_es_views WHERE key = ?", (guard.key,)
                    ).fetchone()
                    if (None if row is None else row[0]) != guard.position:
                        conn.rollback()
                        return False
                conn.executemany(
                    "DELETE FROM coder_es_views WHERE key = ?", [(k,) for k in deletes]
                )
                conn.executemany(
                    "INSERT OR REPLACE INTO coder_es_views (key, position, data) VALUES (?, ?, ?)",
                    [(k, r.position, r.data) for k, r in puts.items()],
                )
                conn.commit()
            except BaseException:
                conn.rollback()
                raise
            return True

    def scrub(self) -> None:
        """Zero what deleted rows left in the file: ``secure_delete`` then VACUUM (which rebuilds
        the file from the live rows only) and a checkpoint that truncates the write-ahead log,
        whose old frames still hold the pages as they were."""
        with self._lock:
            conn = self._conn
            conn.commit()
            conn.execute("PRAGMA secure_delete = ON")
            conn.execute("VACUUM")
            busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if busy:
            msg = "another connection is reading the store: its write-ahead log was not emptied"
            raise StoreBusyError(msg)

    def close(self) -> None:
        self._conn.close()


class StoreBusyError(StoreError):
    """Freed space could not be scrubbed now: another process has the store open."""


class PostgresViewStore(ViewStore):
    def __init__(self, conninfo: dict[str, Any], schema: str = "public") -> None:
        self._table = f"{schema}.coder_es_views"
        self._pool = open_postgres_table(
            conninfo,
            "(key text PRIMARY KEY, position bigint NOT NULL, data bytea NOT NULL)",
            table=self._table,
            what="view store",
        )

    def get(self, key: str) -> ViewRecord | None:
        with self._pool.connection() as conn:
            row = conn.execute(
                f"SELECT position, data FROM {self._table} WHERE key = %s", (key,)
            ).fetchone()
        return None if row is None else ViewRecord(int(row[0]), bytes(row[1]))

    def put(self, key: str, record: ViewRecord) -> None:
        with self._pool.connection() as conn:
            conn.execute(
                f"INSERT INTO {self._table} (key, position, data) VALUES (%s, %s, %s) "
                "ON CONFLICT (key) DO UPDATE "
                "SET position = EXCLUDED.position, data = EXCLUDED.data",
                (key, record.position, record.data),
            )

    def delete(self, key: str) -> None:
        with self._pool.connection() as conn:
            conn.execute(f"DELETE FROM {self._table} WHERE key = %s", (key,))

    def keys(self, prefix: str) -> list[str]:
        with self._pool.connection() as conn:
            rows = conn.execute(
                f"SELECT key FROM {self._table} WHERE left(key, %s) = %s ORDER BY key",
                (len(prefix), prefix),
            ).fetchall()
        return [str(r[0]) for r in rows]

    def batch(
        self,
        puts: Mapping[str, ViewRecord],
        deletes: Sequence[str] = (),
        guards: Sequence[Guard] = (),
    ) -> bool:
        with self._pool.connection() as conn, conn.transaction():
            # A transaction-level advisory lock per table: two batches never interleave their
            # guard checks (a guard on an absent row cannot be locked with FOR UPDATE).
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self._table,))
            for guard in guards:
                row = conn.execute(
                    f"SELECT position FROM {self._table} WHERE key = %s", (guard.key,)
                ).fetchone()
                if (None if row is None else int(row[0])) != guard.position:
                    return False
            with conn.cursor() as cur:
                cur.executemany(
                    f"DELETE FROM {self._table} WHERE key = %s", [(k,) for k in deletes]
                )
                cur.executemany(
                    f"INSERT INTO {self._table} (key, position, data) VALUES (%s, %s, %s) "
                    "ON CONFLICT (key) DO UPDATE "
                    "SET position = EXCLUDED.position, data = EXCLUDED.data",
                    [(k, r.position, r.data) for k, r in puts.items()],
                )
        return True

    def scrub(self) -> None:
        """Deleted rows are dead tuples until VACUUM; VACUUM FULL rewrites the table into new
        files, so the old pages are given back to the file system rather than kept for reuse.
        (The write-ahead log and its archive keep their copies until they are recycled.)"""
        with self._pool.connection() as conn:
            conn.autocommit = True
            try:
                conn.execute(f"VACUUM FULL {self._table}")
            finally:
                conn.autocommit = False

    def close(self) -> None:
        self._pool.close()
