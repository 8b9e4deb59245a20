"""Backend choice by configuration: lmdb (default), sqlite, postgres, popo.

``StoreConfig`` (built from the validated configuration, ``coder_es.config``: ``--store`` /
``CODER_ES_STORE``, ``--backend`` / ``CODER_ES_BACKEND``, eventsourcing's own ``POSTGRES_*`` and
``LMDB_*`` variables) gives the eventsourcing environment that selects a persistence module, and
opens the blob and view stores on the same backend.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from coder_es.errors import DAMAGED_STORE_ADVICE, StoreError, UsageError

if TYPE_CHECKING:
    from coder_es.store.blobs import BlobStore
    from coder_es.store.lease import LeaseStore
    from coder_es.store.views import ViewStore

# The blob and view stores are imported when opened: the configuration is read by every
# command, most of which never open a store (coder_es.cli.commands: start-up time).

BACKENDS = ("lmdb", "sqlite", "postgres", "popo")
DEFAULT_BACKEND = "lmdb"

_POSTGRES_DEFAULTS = {
    "POSTGRES_DBNAME": "postgres",
    "POSTGRES_HOST": "127.0.0.1",
    "POSTGRES_PORT": "5432",
    "POSTGRES_USER": "postgres",
    "POSTGRES_PASSWORD": "",
}


@dataclass(frozen=True)
class StoreConfig:
    backend: str
    path: Path
    """The store directory (``.coder-es/`` of the workspace by default)."""
    durable: bool = True
    """LMDB: sync every commit to disk. False keeps the store consistent after a crash but may
    lose the last commits."""
    extra: Mapping[str, str] = field(default_factory=dict)
    """Further eventsourcing settings (POSTGRES_*, LMDB_MAP_SIZE, ...)."""

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            msg = f"unknown backend {self.backend!r}; choose one of {', '.join(BACKENDS)}"
            raise UsageError(msg)

    @property
    def sqlite_file(self) -> Path:
        return self.path / "events.sqlite"

    @property
    def lmdb_dir(self) -> Path:
        return self.path / "lmdb"

    def postgres_settings(self) -> dict[str, str]:
        settings = dict(_POSTGRES_DEFAULTS)
        settings.update({k: v for k, v in self.extra.items() if k.startswith("POSTGRES_")})
        return settings

    def describe(self) -> str:
        if self.backend == "postgres":
            pg = self.postgres_settings()
            return (
                f"postgres://{pg['POSTGRES_USER']}@{pg['POSTGRES_HOST']}:{pg['POSTGRES_PORT']}"
                f"/{pg['POSTGRES_DBNAME']}"
            )
        if self.backend == "sqlite":
            return str(self.sqlite_file)
        if self.backend == "lmdb":
            return str(self.lmdb_dir)
        return "memory"

    def eventsourcing_env(self) -> dict[str, str]:
        """The environment that makes an eventsourcing Application use this backend."""
        env: dict[str, str] = {}
        if self.backend == "lmdb":
            env["PERSISTENCE_MODULE"] = "coder_es.store.lmdb"
            env["LMDB_PATH"] = str(self.lmdb_dir)
            env["LMDB_DURABILITY"] = "durable" if self.durable else "crash_consistent"
        elif self.backend == "sqlite":
            env["PERSISTENCE_MODULE"] = "eventsourcing.sqlite"
            env["SQLITE_DBNAME"] = str(self.sqlite_file)
            env["SQLITE_LOCK_TIMEOUT"] = "30"
        elif self.backend == "postgres":
            env["PERSISTENCE_MODULE"] = "eventsourcing.postgres"
            env.update(self.postgres_settings())
        else:
            env["PERSISTENCE_MODULE"] = "eventsourcing.popo"
        env.update({k: v for k, v in self.extra.items() if k.startswith("LMDB_")})
        return env

    def exists(self) -> bool:
        """Whether there is a store to open: the file backends' files exist (a database server
        or memory always counts). Read-only commands check this instead of creating one."""
        # Anything at the data file's place counts: a damaged one (a directory, say) is named
        # by the opening, not taken for a missing store.
        if self.backend == "lmdb":
            return os.path.lexists(self.lmdb_dir / "data.mdb")
        if self.backend == "sqlite":
            return os.path.lexists(self.sqlite_file)
        return True

    def prepare(self) -> None:
        """Create the store directory for file backends, with a clear error if it cannot be."""
        if self.backend in ("lmdb", "sqlite"):
            try:
                self.path.mkdir(parents=True, exist_ok=True)
                if self.backend == "lmdb":
                    self.lmdb_dir.mkdir(exist_ok=True)
                elif self.sqlite_file.is_dir():
                    msg = (
                        f"the SQLite store file {self.sqlite_file} is a directory, not a file; "
                        f"{DAMAGED_STORE_ADVICE}"
                    )
                    raise StoreError(msg)
                # Like a virtualenv, the store ignores itself so it never shows in `git status`.
                ignore = self.path / ".gitignore"
                if not ignore.exists():
                    ignore.write_text("# created by coder-es: the event store is not source\n*\n")
            except OSError as e:
                msg = f"cannot create the store directory {self.path}: {e.strerror}"
                raise UsageError(msg) from e

    def postgres_conninfo(self) -> dict[str, str]:
        pg = self.postgres_settings()
        return {
            "dbname": pg["POSTGRES_DBNAME"],
            "host": pg["POSTGRES_HOST"],
            "port": pg["POSTGRES_PORT"],
            "user": pg["POSTGRES_USER"],
            "password": pg["POSTGRES_PASSWORD"],
        }

    def postgres_schema(self) -> str:
        return self.postgres_settings().get("POSTGRES_SCHEMA", "") or "public"

    def open_view_store(self) -> ViewStore:
        if self.backend == "lmdb":
            from coder_es.store.lmdb_views import LMDBViewStore

            return LMDBViewStore(self.eventsourcing_env())
        if self.backend == "sqlite":
            from coder_es.store.views import SQLiteViewStore

            return SQLiteViewStore(str(self.sqlite_file))
        if self.backend == "postgres":
            from coder_es.store.views import PostgresViewStore

            return PostgresViewStore(self.postgres_conninfo(), schema=self.postgres_schema())
        from coder_es.store.views import MemoryViewStore

        return MemoryViewStore()

    def open_lease_store(self) -> LeaseStore:
        """The sessions' leases (one writer per session), on this backend."""
        from coder_es.store import lease

        if self.backend in ("lmdb", "sqlite"):
            return lease.FileLeaseStore(self.path / lease.LEASE_DIRNAME)
        if self.backend == "postgres":
            return lease.PostgresLeaseStore(self.postgres_conninfo(), self.postgres_schema())
        return lease.MemoryLeaseStore()

    def open_blob_store(self) -> BlobStore:
        if self.backend == "lmdb":
            from coder_es.store.lmdb import LMDBBlobStore

            return LMDBBlobStore(self.eventsourcing_env())
        if self.backend == "sqlite":
            from coder_es.store.sql_blobs import SQLiteBlobStore

            return SQLiteBlobStore(str(self.sqlite_file))
        if self.backend == "postgres":
            from coder_es.store.sql_blobs import PostgresBlobStore

            return PostgresBlobStore(self.postgres_conninfo(), schema=self.postgres_schema())
        from coder_es.store.blobs import MemoryBlobStore

        return MemoryBlobStore()
