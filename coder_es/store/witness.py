"""The witness: each session's last (version, chain hash), kept OUTSIDE the store.

The anchor (``coder_es.store.anchor``) witnesses a session's head from inside the store, so
whoever deletes a session's last events together with its anchor key, replaces ``data.mdb`` by an
empty file or deletes the store directory takes the evidence along. The witness is an append-only
file per store in the user's data directory (``coder_es.userdirs.user_data_dir()/witness/``), out
of reach of the store's directory and of the agent's shell commands (the sandbox hides it):

    coder-es witness 1 {"backend": "lmdb", "store": "/repo/.coder-es/lmdb", "id": "..."}
    <session> <version> <chain hash>
    ...

One line is appended after every save of a session (one ``write`` on a descriptor kept open, no
fsync: a witness line lost in a power cut only weakens the check for the events written just
before it). ``verify`` reads the file and treats each session's latest line like an anchor: a
session that ends before the witnessed version lost its tail, a different hash at that version
was rewritten, and a session the witness saw that the store no longer has was lost.

The file is named after the store's identity: a hash of the backend and the store's absolute
location, also recorded inside the store (view key ``store-identity``) when the store is created.
A store deleted and created again at the same place gets the same name, so its losses show; a
store moved elsewhere keeps its recorded identity and so its witness.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coder_es.store.views import ViewRecord, ViewStore
from coder_es.userdirs import user_data_dir

HEADER = "coder-es witness 1 "
IDENTITY_KEY = "store-identity"


@dataclass(frozen=True)
class Witnessed:
    session: str
    version: int
    head: str


def location_identity(backend: str, where: str) -> str:
    """The identity a store at ``where`` (its described location) gets when it is created."""
    return hashlib.sha256(f"coder-es store\0{backend}\0{where}".encode()).hexdigest()[:32]


def store_identity(views: ViewStore, backend: str, where: str) -> str:
    """The store's identity: the one recorded inside it, else its location's (recorded now)."""
    record = views.get(IDENTITY_KEY)
    if record is not None and record.data:
        return record.data.decode("ascii", "replace")
    identity = location_identity(backend, where)
    views.put(IDENTITY_KEY, ViewRecord(position=1, data=identity.encode()))
    return identity


def witness_path(identity: str) -> Path:
    return user_data_dir() / "witness" / identity


class Witness:
    """The witness file of one store, opened for appending on the first save."""

    def __init__(self, path: Path, *, backend: str, where: str, identity: str) -> None:
        self.path = path
        self._header = {"backend": backend, "store": where, "id": identity}
        self._fd: int | None = None
        self._lock = threading.Lock()
        self.error: str | None = None
        """Why the last append failed (the save itself had succeeded); None when all went in."""

    def record(self, session: str, version: int, head: str) -> None:
        line = f"{session} {version} {head}\n".encode()
        with self._lock:
            try:
                fd = self._fd if self._fd is not None else self._open()
                os.write(fd, line)
            except OSError as e:
                # Never fail a save that is already committed; doctor and verify say it.
                self.error = f"cannot write the witness {self.path}: {e.strerror or e}"

    def _open(self) -> int:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(self.path, flags, 0o600)
        if os.fstat(fd).st_size == 0:
            os.write(fd, (HEADER + json.dumps(self._header, sort_keys=True) + "\n").encode())
        self._fd = fd
        return fd

    def latest(self) -> dict[str, Witnessed]:
        """Each session's highest witnessed version (empty when there is no witness yet)."""
        return read_witness(self.path)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                with contextlib.suppress(OSError):
                    os.close(self._fd)
                self._fd = None


def read_witness(path: Path) -> dict[str, Witnessed]:
    found: dict[str, Witnessed] = {}
    for entry in _entries(path):
        known = found.get(entry.session)
        if known is None or entry.version > known.version:
            found[entry.session] = entry
    return found


def _entries(path: Path) -> Iterator[Witnessed]:
    try:
        f = open(path, encoding="ascii", errors="replace")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return
    with f:
        for line in f:
            parts = line.split()
            # The header, and a line cut short by a crash, are skipped.
            if len(parts) == 3 and parts[1].isdigit() and len(parts[2]) == 64:
                yield Witnessed(parts[0], int(parts[1]), parts[2])


def witness_of_location(config: Any) -> Path:
    """The witness file a store created at ``config``'s location has (when its identity was not
    carried over from elsewhere): for a store that is gone, to say what it lost."""
    return witness_path(location_identity(config.backend, store_location(config)))


def open_witness(app: Any) -> Witness | None:
    """The witness of an application's store (None for a memory store)."""
    config = app.config
    if config.backend == "popo":
        return None
    where = store_location(config)
    identity = store_identity(app.views, config.backend, where)
    return Witness(witness_path(identity), backend=config.backend, where=where, identity=identity)


def store_location(config: Any) -> str:
    """The location a store's identity is derived from."""
    if config.backend == "postgres":
        return f"{config.describe()}?schema={config.postgres_schema()}"
    return os.path.abspath(config.describe())
