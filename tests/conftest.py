"""Shared fixtures: store configurations for every backend available on this machine."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from backends import _PG_REASON, BACKENDS, PERSISTENT_BACKENDS, PG, store_config_for

from coder_es.store.config import StoreConfig


@pytest.fixture(autouse=True)
def _isolated_user_dirs(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Every test gets its own HOME and XDG directories: nothing a test does (keys, witnesses,
    trust records, user config) reaches the real user's files or another test's."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local" / "share"))
    # A `.coder-es/` left in /tmp by someone's demo must not become every test's store: the
    # store search (coder_es.store.discover) stops below pytest's temporary root.
    monkeypatch.setenv("CODER_ES_CEILING_DIRECTORIES", str(tmp_path_factory.getbasetemp()))
    return home


@pytest.fixture
def pg_schema() -> Iterator[str]:
    """A fresh PostgreSQL schema, dropped afterwards, so tests never see each other's rows."""
    if _PG_REASON is not None:
        pytest.skip(_PG_REASON)
    import psycopg

    schema = f"t_{uuid.uuid4().hex[:12]}"
    conninfo: dict[str, Any] = dict(
        dbname=PG["POSTGRES_DBNAME"],
        host=PG["POSTGRES_HOST"],
        port=PG["POSTGRES_PORT"],
        user=PG["POSTGRES_USER"],
    )
    with psycopg.connect(**conninfo, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    yield schema
    with psycopg.connect(**conninfo, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture(params=BACKENDS)
def store_config(request: pytest.FixtureRequest, tmp_path: Path) -> StoreConfig:
    """A store configuration for each backend (postgres and lmdb skip with a reason if absent)."""
    return store_config_for(request, request.param, tmp_path)


@pytest.fixture(params=PERSISTENT_BACKENDS)
def persistent_store_config(request: pytest.FixtureRequest, tmp_path: Path) -> StoreConfig:
    """Like ``store_config`` without popo: for tests that reopen the store from another
    process or a later command-line call."""
    return store_config_for(request, request.param, tmp_path)
