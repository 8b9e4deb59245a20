"""One writer per session: a lease in the store, held for a turn or a branching command.

A process that runs a turn, or moves, labels or forks a session, first takes the session's lease;
a second one (another ``run``, a ``rewind``, an editor's client, a fleet worker, on this machine or
another) fails at once with ``SessionBusyError`` naming the holder: "session S is busy (pid N on
host H since T)".

The lease is a lock the operating system or the database releases when its holder dies, so a
``kill -9`` never leaves a session locked and there is no expiry to tune:

- LMDB and SQLite stores (one machine): an ``flock`` on ``<store>/leases/<session>.lease``, a
  file that also says who holds it. The kernel drops the lock with the holder's last file
  descriptor, so a dead holder's lease is free at once. The file is kept after release (one
  small file per session; creating and removing it each time cost more than the lock), and is
  only a free lease while nobody has it locked. Should someone remove it anyway, an acquirer
  checks it locked the file that is still at that path, so two holders never coexist.
- PostgreSQL (many machines): a session-level ``pg_try_advisory_lock`` on a key derived from the
  schema and the session, held by one connection per process, plus a row in ``coder_es_leases``
  saying who holds it. PostgreSQL releases the lock when the holder's connection ends: at once when
  the holder's process dies (its socket closes), and for a holder whose machine vanished when the
  server's TCP keepalives give up (set on the lease connection to ``KEEPALIVE_S``, about 25 s,
  instead of the system's two hours).
- popo (memory): a lock per session in the store object.

Within one process the same rules hold: two handles on one session (two WebSocket clients of
``serve``) exclude each other too.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import json
import os
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from coder_es.errors import SessionBusyError, StoreError

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

LEASE_DIRNAME = "leases"
_RECORD_SIZE = 512  # bytes of a lease file: the holder's JSON, padded with spaces
# Server-side keepalives on the PostgreSQL lease connection: idle 10 s, then 3 probes 5 s apart.
KEEPALIVE_S = {"tcp_keepalives_idle": 10, "tcp_keepalives_interval": 5, "tcp_keepalives_count": 3}


@dataclass(frozen=True)
class Holder:
    """Who holds a lease: shown to whoever finds the session busy."""

    pid: int
    host: str
    since: float
    purpose: str = ""

    @classmethod
    def me(cls, purpose: str) -> Holder:
        return cls(os.getpid(), _hostname(), time.time(), purpose[:100])

    def describe(self) -> str:
        when = datetime.fromtimestamp(self.since, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        doing = f", {self.purpose}" if self.purpose else ""
        return f"pid {self.pid} on host {self.host} since {when}{doing}"

    def to_json(self) -> bytes:
        return json.dumps(
            {"pid": self.pid, "host": self.host, "since": self.since, "purpose": self.purpose}
        ).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Holder | None:
        try:
            d = json.loads(raw)
            return cls(int(d["pid"]), str(d["host"]), float(d["since"]), str(d.get("purpose", "")))
        except (ValueError, KeyError, TypeError):
            return None  # being written right now, or damaged: the lock itself still holds


@functools.cache
def _hostname() -> str:
    import socket  # only when a lease is taken: reading commands do not pay for its import

    return socket.gethostname()


def busy(session: str, holder: Holder | None) -> SessionBusyError:
    return SessionBusyError(session, holder.describe() if holder else None)


class Lease(ABC):
    """A held lease. ``release`` is idempotent."""

    def __init__(self, session: str, holder: Holder) -> None:
        self.session = session
        self.holder = holder
        self.released = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self._release()

    @abstractmethod
    def _release(self) -> None: ...

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class LeaseStore(ABC):
    """The leases of one store."""

    @abstractmethod
    def acquire(self, session: str, purpose: str = "") -> Lease:
        """Take the session's lease, or raise ``SessionBusyError`` at once."""

    @contextlib.contextmanager
    def hold(self, session: str, purpose: str = "") -> Iterator[Lease]:
        lease = self.acquire(session, purpose)
        try:
            yield lease
        finally:
            lease.release()

    def holder(self, session: str) -> Holder | None:
        """Who holds the session's lease now (None: free, or not known)."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release backend resources (leases still held are released by their holders)."""


# ---------------------------------------------------------------------- files (LMDB, SQLite)


class _FileLease(Lease):
    def __init__(self, session: str, holder: Holder, fd: int, path: Path) -> None:
        super().__init__(session, holder)
        self._fd = fd
        self._path = path

    def _release(self) -> None:
        # The file stays (creating and removing it would cost more than the lock itself); it
        # still names the last holder, and an unlocked file is a free lease.
        os.close(self._fd)  # closing releases the lock


class FileLeaseStore(LeaseStore):
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _path(self, session: str) -> Path:
        return self.directory / f"{session}.lease"

    def acquire(self, session: str, purpose: str = "") -> Lease:
        path = self._path(session)
        while True:
            fd = self._open(path)
            try:
                if not _try_flock(fd):
                    raise busy(session, Holder.from_json(_read_all(fd)))
                try:
                    current = os.fstat(fd).st_ino == os.stat(path).st_ino
                except FileNotFoundError:
                    current = False
                if current:
                    holder = Holder.me(purpose)
                    # Overwritten in place at a fixed size: truncating and growing the file
                    # again would cost block allocations on every acquisition.
                    os.pwrite(fd, holder.to_json().ljust(_RECORD_SIZE), 0)
                    return _FileLease(session, holder, fd, path)
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)  # the holder released (and removed) it meanwhile: take the new file

    def _open(self, path: Path) -> int:
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        try:
            return os.open(path, flags, 0o600)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise StoreError(f"cannot take a session lease in {self.directory}: {e}") from e
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            return os.open(path, flags, 0o600)
        except OSError as e:
            raise StoreError(f"cannot take a session lease in {self.directory}: {e}") from e

    def holder(self, session: str) -> Holder | None:
        try:
            fd = os.open(self._path(session), os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return None
        try:
            if _try_flock(fd, shared=True):
                return None  # nobody holds it (a file left by a holder that died)
            return Holder.from_json(_read_all(fd))
        finally:
            os.close(fd)


def _try_flock(fd: int, *, shared: bool = False) -> bool:
    if fcntl is None:  # pragma: no cover - not POSIX: no exclusion
        return True
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            return False
        raise
    return True


def _read_all(fd: int) -> bytes:
    try:
        return os.pread(fd, _RECORD_SIZE, 0)
    except OSError:
        return b""


# ---------------------------------------------------------------------- memory (popo)


class _MemoryLease(Lease):
    def __init__(self, session: str, holder: Holder, store: MemoryLeaseStore) -> None:
        super().__init__(session, holder)
        self._store = store

    def _release(self) -> None:
        with self._store._lock:
            self._store._held.pop(self.session, None)


class MemoryLeaseStore(LeaseStore):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, Holder] = {}

    def acquire(self, session: str, purpose: str = "") -> Lease:
        with self._lock:
            found = self._held.get(session)
            if found is not None:
                raise busy(session, found)
            holder = self._held[session] = Holder.me(purpose)
        return _MemoryLease(session, holder, self)

    def holder(self, session: str) -> Holder | None:
        with self._lock:
            return self._held.get(session)


# ---------------------------------------------------------------------- PostgreSQL


class _PostgresLease(Lease):
    def __init__(self, session: str, holder: Holder, store: PostgresLeaseStore) -> None:
        super().__init__(session, holder)
        self._store = store

    def _release(self) -> None:
        self._store._unlock(self.session)


class PostgresLeaseStore(LeaseStore):
    """Advisory locks on one connection per process (opened on first use), plus who holds them.

    Advisory locks are re-entrant per connection, so this process's own holders are kept in
    ``_held`` and a second acquisition from this process is refused before asking the server.
    """

    def __init__(self, conninfo: dict[str, Any], schema: str = "public") -> None:
        self._conninfo = conninfo
        self._schema = schema
        self._table = f"{schema}.coder_es_leases"
        self._conn: Any = None
        self._lock = threading.Lock()
        self._held: dict[str, Holder] = {}

    def _key(self, session: str) -> int:
        raw = hashlib.sha256(f"coder-es-lease\0{self._schema}\0{session}".encode()).digest()
        return int.from_bytes(raw[:8], "big", signed=True)

    def _connection(self) -> Any:
        import psycopg
        from psycopg.conninfo import make_conninfo

        conn = self._conn
        if conn is not None and not conn.closed and not conn.broken:
            return conn
        # A lost connection lost its locks with it: forget them (their holders find out when
        # they release; the log's optimistic concurrency still refuses a conflicting write).
        self._held.clear()
        info = make_conninfo(**{k: v for k, v in self._conninfo.items() if v})
        try:
            conn = psycopg.connect(info, autocommit=True, connect_timeout=10)
            for name, value in KEEPALIVE_S.items():
                conn.execute(f"SET {name} = {int(value)}")
            # The holder row only informs a refused acquirer: it need not wait for a WAL flush.
            conn.execute("SET synchronous_commit = off")
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {self._table} (session text PRIMARY KEY, "
                "pid integer NOT NULL, host text NOT NULL, since double precision NOT NULL, "
                "purpose text NOT NULL)"
            )
        except psycopg.Error as e:
            msg = f"cannot take a session lease on PostgreSQL ({self._conninfo.get('dbname')}): {e}"
            raise StoreError(msg) from e
        self._conn = conn
        return conn

    def acquire(self, session: str, purpose: str = "") -> Lease:
        import psycopg

        holder = Holder.me(purpose)
        with self._lock:
            if session in self._held:
                raise busy(session, self._held[session])
            try:
                conn = self._connection()
                # One round trip: take the lock and, if it was free, say who holds it now.
                row = conn.execute(
                    "WITH l AS (SELECT pg_try_advisory_lock(%s) AS ok), "
                    f"w AS (INSERT INTO {self._table} (session, pid, host, since, purpose) "
                    "SELECT %s, %s, %s, %s, %s FROM l WHERE l.ok "
                    "ON CONFLICT (session) DO UPDATE SET pid = EXCLUDED.pid, "
                    "host = EXCLUDED.host, since = EXCLUDED.since, purpose = EXCLUDED.purpose) "
                    "SELECT ok FROM l",
                    (self._key(session), session, holder.pid, holder.host, holder.since, purpose),
                ).fetchone()
                if not row[0]:
                    raise busy(session, self._read_holder(conn, session))
            except psycopg.Error as e:
                msg = f"cannot take the lease of session {session} on PostgreSQL: {e}"
                raise StoreError(msg) from e
            self._held[session] = holder
        return _PostgresLease(session, holder, self)

    def _read_holder(self, conn: Any, session: str) -> Holder | None:
        row = conn.execute(
            f"SELECT pid, host, since, purpose FROM {self._table} WHERE session = %s", (session,)
        ).fetchone()
        return None if row is None else Holder(int(row[0]), str(row[1]), float(row[2]), row[3])

    def _unlock(self, session: str) -> None:
        import psycopg

        with self._lock:
            if self._held.pop(session, None) is None:
                return
            conn = self._conn
            if conn is None or conn.closed or conn.broken:
                return  # the lock went with the connection
            with contextlib.suppress(psycopg.Error):
                conn.execute("SELECT pg_advisory_unlock(%s)", (self._key(session),))

    def holder(self, session: str) -> Holder | None:
        import psycopg

        with self._lock:
            if session in self._held:
                return self._held[session]
            try:
                conn = self._connection()
                row = conn.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
                    "AND ((classid::bigint << 32) | objid::bigint) = %s",
                    (self._key(session),),
                ).fetchone()
                return self._read_holder(conn, session) if row and row[0] else None
            except psycopg.Error:
                return None

    def close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
            self._held.clear()
        if conn is not None:
            conn.close()
