"""Opening a table of our own beside the events, in the same SQLite file or PostgreSQL database."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from coder_es.errors import StoreError

if TYPE_CHECKING:
    import sqlite3


def open_sqlite_table(
    db_path: str, definition: str, *, table: str, what: str
) -> sqlite3.Connection:
    """A connection (usable from any thread, under the caller's lock) with ``table`` created
    from ``definition`` (the column list in parentheses, and any table options)."""
    import sqlite3  # only for the SQLite backend: the others do not pay for its import

    try:
        conn = sqlite3.connect(db_path, check_same_thread=False, timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"CREATE TABLE IF NOT EXISTS {table} {definition}")
        conn.commit()
    except sqlite3.DatabaseError as e:
        msg = f"cannot open the SQLite {what} at {db_path}: {e}"
        raise StoreError(msg) from e
    return conn


def open_postgres_table(conninfo: dict[str, Any], definition: str, *, table: str, what: str) -> Any:
    """A small connection pool with ``table`` (schema-qualified) created."""
    import psycopg
    from psycopg_pool import ConnectionPool

    try:
        pool = ConnectionPool(kwargs=conninfo, min_size=1, max_size=4, open=True)
        with pool.connection() as conn:
            conn.execute(f"CREATE TABLE IF NOT EXISTS {table} {definition}")
    except psycopg.Error as e:
        msg = f"cannot open the PostgreSQL {what} ({conninfo.get('dbname')}): {e}"
        raise StoreError(msg) from e
    return pool
