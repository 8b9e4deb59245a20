"""Checkpoints of projections: small mutable records beside the events, always rebuildable.

A projection that must open fast (the conversation tree of a 100k-event session) stores its state
here with the position it reached (``ViewRecord.position``: the session version or notification id
it has processed). Losing a checkpoint only costs a rebuild from the events; the log stays the only
source of truth.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

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

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release backend resources."""


class MemoryViewStore(ViewStore):
    def __init__(self) -> None:
        self._records: dict[str, ViewRecord] = {}

    def get(self, key: str) -> ViewRecord | None:
        return self._records.get(key)

    def put(self, key: str, record: ViewRecord) -> None:
        self._records[key] = record

    def delete(self, key: str) -> None:
        self._records.pop(key, None)


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

    def close(self) -> None:
        self._conn.close()


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

    def close(self) -> None:
        self._pool.close()
