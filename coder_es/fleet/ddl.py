"""One process at a time creates the store's tables and functions.

Opening a ``CoderApp`` on PostgreSQL runs eventsourcing's ``CREATE ... IF NOT EXISTS`` and
``CREATE OR REPLACE FUNCTION`` statements, and PostgreSQL fails such statements run at the same
moment by several sessions ("tuple concurrently updated"). A fleet starts many processes at once,
so each opens its store under this advisory lock.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg.conninfo import make_conninfo

from coder_es.errors import StoreError
from coder_es.store.config import StoreConfig

# Any fixed 64-bit number, shared by every coder-es process on the database.
_DDL_LOCK = 0x636F646572_6464


@contextmanager
def store_setup_lock(config: StoreConfig) -> Iterator[None]:
    info = make_conninfo(**{k: v for k, v in config.postgres_conninfo().items() if v})
    try:
        conn = psycopg.connect(info, autocommit=True, connect_timeout=10)
    except psycopg.Error as e:
        raise StoreError(f"cannot reach PostgreSQL at {config.describe()}: {e}") from e
    with conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (_DDL_LOCK,))
        try:
            yield
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_DDL_LOCK,))
