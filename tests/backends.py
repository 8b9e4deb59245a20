"""Backends available to the tests on this machine, and how to configure a store for each.

Imported by tests/conftest.py (fixtures) and by test modules (``from backends import ...``).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from coder_es.store.config import StoreConfig

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"

PG = {
    "POSTGRES_DBNAME": os.environ.get("CODER_ES_TEST_PG_DB", "test"),
    "POSTGRES_HOST": os.environ.get("CODER_ES_TEST_PG_HOST", "127.0.0.1"),
    "POSTGRES_PORT": os.environ.get("CODER_ES_TEST_PG_PORT", "5432"),
    "POSTGRES_USER": os.environ.get("CODER_ES_TEST_PG_USER", "postgres"),
    "POSTGRES_PASSWORD": "",
}


def postgres_unavailable() -> str | None:
    """Why PostgreSQL tests cannot run here, or None when they can."""
    if importlib.util.find_spec("psycopg") is None:
        return "psycopg is not installed (pip install -e '.[postgres]')"
    import psycopg

    try:
        with psycopg.connect(
            dbname=PG["POSTGRES_DBNAME"],
            host=PG["POSTGRES_HOST"],
            port=PG["POSTGRES_PORT"],
            user=PG["POSTGRES_USER"],
            connect_timeout=3,
        ):
            return None
    except psycopg.Error as e:
        return f"PostgreSQL is not reachable at {PG['POSTGRES_HOST']}:{PG['POSTGRES_PORT']}: {e}"


_PG_REASON = postgres_unavailable()
requires_postgres = pytest.mark.skipif(_PG_REASON is not None, reason=_PG_REASON or "")


def lmdb_unavailable() -> str | None:
    if importlib.util.find_spec("coder_es.store.lmdb") is None:
        return "coder_es.store.lmdb is not built yet"
    return None


def make_config(backend: str, tmp_path: Path, pg_schema: str | None = None) -> StoreConfig:
    extra: dict[str, str] = {}
    if backend == "postgres":
        assert pg_schema is not None
        extra = {**PG, "POSTGRES_SCHEMA": pg_schema}
    return StoreConfig(backend=backend, path=tmp_path / "store", extra=extra)


BACKENDS = ["popo", "sqlite", "lmdb", "postgres"]
PERSISTENT_BACKENDS = ["sqlite", "lmdb", "postgres"]
"""The backends a second process (or a later CLI call) can read back: popo lives in memory."""


def store_config_for(request: pytest.FixtureRequest, backend: str, tmp_path: Path) -> StoreConfig:
    """The configuration for ``backend``, skipping the test with the reason when it is absent."""
    if backend == "lmdb" and (reason := lmdb_unavailable()):
        pytest.skip(reason)
    schema = request.getfixturevalue("pg_schema") if backend == "postgres" else None
    return make_config(backend, tmp_path, schema)


def cli_store_args(config: StoreConfig) -> list[str]:
    """The ``coder-es`` options that open the store ``config`` describes."""
    return ["--backend", config.backend, "--store", str(config.path)]


def cli_store_env(config: StoreConfig) -> dict[str, str]:
    """The environment the CLI needs beside :func:`cli_store_args` (PostgreSQL's settings)."""
    return {k: v for k, v in config.extra.items() if k.startswith("POSTGRES_")}
