"""One process at a time creates the store's tables and functions on PostgreSQL.

Opening a store on PostgreSQL runs eventsourcing's ``CREATE ... IF NOT EXISTS`` and ``CREATE OR
REPLACE FUNCTION`` statements and our own blob and view tables, and PostgreSQL fails such
statements run at the same moment by several sessions ("tuple concurrently updated"). Many
processes opening one database at once (a fleet, a team server's workers) therefore create them
under one advisory lock. Other backends need no lock.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from coder_es.errors import StoreError
from coder_es.store.config import StoreConfig

# Any fixed 64-bit number, shared by every coder-es process on the database.
_DDL_LOCK = 0x636F646572_6464


# Nested openings in one thread (an application opened while the lock is held) must not wait on
# the lock their own thread holds through another connection.
class _Held(threading.local):
    active = False


_held = _Held()


@contextmanager
def store_setup_lock(config: StoreConfig) -> Iterator[None]:
    if config.backend != "postgres" or _held.active:
        yield
        return
    import psycopg
    from psycopg.conninfo import make_conninfo

    info = make_conninfo(**{k: v for k, v in config.postgres_conninfo().items() if v})
    try:
        conn = psycopg.connect(info, autocommit=True, connect_timeout=10)
    except psycopg.Error as e:
        raise StoreError(f"cannot reach PostgreSQL at {config.describe()}: {e}") from e
    with conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (_DDL_LOCK,))
        _held.active = True
        try:
            yield
        finally:
            _held.active = False
            conn.execute("SELECT pg_advisory_unlock(%s)", (_DDL_LOCK,))
