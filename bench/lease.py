"""The session lease (one writer per session): what a turn or a branching command pays for it.

    python3 bench/lease.py                       lmdb, sqlite and postgres (when reachable)
    python3 bench/lease.py --rounds 1000 --backend sqlite

Printed per backend:

- ``acquire+release``: the median time to take a free session's lease and give it back (a turn
  or a branching command does this once). Targets: < 1 ms on LMDB and SQLite, < 5 ms on
  PostgreSQL.
- ``busy refusal``: the median time to be refused a lease another process holds (what a second
  ``run`` waits before it fails).
- ``store read``: the baseline, measured in the same run on the same store: one plain read of a
  session's last event (``CoderApp.last_version``). The ratios say how many such reads a lease
  costs.
- ``takeover after kill -9``: the median and maximum time from killing a process that holds the
  lease to another process holding it (the kernel or PostgreSQL frees it; nothing expires).

Also printed: the witness (``coder_es.store.witness``): the median cost of the one append each
save adds, against one save of one event on the same store (its baseline, same run).

A holder on another machine that vanishes without closing its connection (PostgreSQL only) is
not measured here: the server notices through the lease connection's TCP keepalives, set to
give up after about 25 s (``coder_es.store.lease.KEEPALIVE_S``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from eventsourcing.application import Application

from coder_es.application import CoderApp
from coder_es.errors import SessionBusyError
from coder_es.store.config import StoreConfig

REPO = Path(__file__).resolve().parent.parent
PG = {
    "POSTGRES_DBNAME": os.environ.get("CODER_ES_TEST_PG_DB", "test"),
    "POSTGRES_HOST": os.environ.get("CODER_ES_TEST_PG_HOST", "127.0.0.1"),
    "POSTGRES_PORT": os.environ.get("CODER_ES_TEST_PG_PORT", "5432"),
    "POSTGRES_USER": os.environ.get("CODER_ES_TEST_PG_USER", "postgres"),
}

HOLDER = """
import json, sys, time
from pathlib import Path
from coder_es.store.config import StoreConfig
cfg = json.loads(sys.argv[1])
config = StoreConfig(backend=cfg["backend"], path=Path(cfg["path"]), extra=cfg["extra"])
lease = config.open_lease_store().acquire(sys.argv[2], "bench holder")
print("held", flush=True)
time.sleep(600)
"""


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def _holder(config: StoreConfig, session: str) -> subprocess.Popen[str]:
    cfg = {"backend": config.backend, "path": str(config.path), "extra": dict(config.extra)}
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, json.dumps(cfg), session],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "held"
    return child


def bench_backend(config: StoreConfig, rounds: int, kills: int) -> dict[str, float]:
    app = CoderApp(config)
    try:
        session = app.start_session(workspace="/bench")
        session.add_user_message("hello")
        app.save(session)
        sid = str(session.id)
        leases = app.leases
        for _ in range(20):  # warm up (the PostgreSQL connection, the lease directory)
            leases.acquire(sid).release()
            app.last_version(session.id)
        reads, cycles = [], []
        for _ in range(rounds):
            t0 = time.perf_counter()
            app.last_version(session.id)
            t1 = time.perf_counter()
            leases.acquire(sid, "bench").release()
            t2 = time.perf_counter()
            reads.append(t1 - t0)
            cycles.append(t2 - t1)
        refusals, takeovers = [], []
        for _ in range(kills):
            child = _holder(config, sid)
            for _ in range(min(rounds, 200)):
                t0 = time.perf_counter()
                try:
                    leases.acquire(sid).release()
                    raise AssertionError("a held lease was granted")
                except SessionBusyError:
                    refusals.append(time.perf_counter() - t0)
            killed = time.perf_counter()
            os.kill(child.pid, signal.SIGKILL)
            while True:
                try:
                    leases.acquire(sid).release()
                    break
                except SessionBusyError:
                    if time.perf_counter() - killed > 30:
                        msg = "a dead holder's lease was not freed in 30 s"
                        raise AssertionError(msg) from None
                    time.sleep(0.0005)
            takeovers.append(time.perf_counter() - killed)
            child.wait()
    finally:
        app.close()
    read = _median_ms(reads)
    return {
        "read_ms": read,
        "cycle_ms": _median_ms(cycles),
        "refusal_ms": _median_ms(refusals),
        "takeover_ms": _median_ms(takeovers),
        "takeover_max_ms": max(takeovers) * 1000,
    }


def bench_witness(config: StoreConfig, rounds: int) -> tuple[float, float]:
    """(median witness append, median save of one event), in ms, on one store."""
    app = CoderApp(config)
    try:
        assert app.witness is not None
        session = app.start_session(workspace="/bench")
        appends, saves = [], []
        for i in range(rounds):
            session.add_user_message(f"message {i}")
            t0 = time.perf_counter()
            Application.save(app, session)  # the save itself, without the anchor and witness
            t1 = time.perf_counter()
            app.witness.record(str(session.id), session.version, session.chain_head)
            t2 = time.perf_counter()
            saves.append(t1 - t0)
            appends.append(t2 - t1)
        return _median_ms(appends), _median_ms(saves)
    finally:
        app.close()


def _pg_connect() -> Any:
    import psycopg

    return psycopg.connect(
        dbname=PG["POSTGRES_DBNAME"],
        host=PG["POSTGRES_HOST"],
        port=PG["POSTGRES_PORT"],
        user=PG["POSTGRES_USER"],
        connect_timeout=3,
        autocommit=True,
    )


def postgres_reachable() -> bool:
    try:
        with _pg_connect():
            return True
    except Exception:
        return False


def postgres_config(where: Path) -> tuple[StoreConfig, str]:
    schema = f"bench_lease_{uuid.uuid4().hex[:8]}"
    with _pg_connect() as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    extra = {**PG, "POSTGRES_PASSWORD": "", "POSTGRES_SCHEMA": schema}
    return StoreConfig(backend="postgres", path=where / "pg", extra=extra), schema


def drop_schema(schema: str) -> None:
    with _pg_connect() as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


TARGET_MS = {"lmdb": 1.0, "sqlite": 1.0, "postgres": 5.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--kills", type=int, default=5, help="kill -9 takeovers per backend")
    parser.add_argument("--backend", choices=sorted(TARGET_MS), action="append")
    args = parser.parse_args()
    backends = args.backend or ["lmdb", "sqlite", "postgres"]
    print(f"{args.rounds} acquire+release cycles, {args.kills} kill -9 takeovers per backend")
    print(
        f"{'backend':<9} {'store read':>10} {'acquire+release':>16} {'ratio':>6} "
        f"{'busy refusal':>13} {'ratio':>6} {'takeover med/max':>18}  target"
    )
    witness_rows: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        # The stores are throwaway: so are their witness files (not in the user's data dir).
        os.environ["XDG_DATA_HOME"] = str(Path(tmp) / "xdg")
        for backend in backends:
            schema = None
            if backend == "postgres":
                if not postgres_reachable():
                    print(f"{backend:<9} skipped: PostgreSQL is not reachable")
                    continue
                config, schema = postgres_config(Path(tmp))
            else:
                config = StoreConfig(backend=backend, path=Path(tmp) / backend)
            try:
                r = bench_backend(config, args.rounds, args.kills)
            finally:
                if schema is not None:
                    drop_schema(schema)
            if backend != "postgres":
                append, save = bench_witness(
                    StoreConfig(backend=backend, path=Path(tmp) / f"{backend}-witness"),
                    min(args.rounds, 300),
                )
                witness_rows.append(
                    f"{backend:<9} witness append {append * 1000:.1f} us per save; one save of "
                    f"one event {save:.3f} ms; ratio {append / save:.4f}"
                )
            target = TARGET_MS[backend]
            verdict = "ok" if r["cycle_ms"] < target else "MISSED"
            print(
                f"{backend:<9} {r['read_ms']:>8.3f}ms {r['cycle_ms']:>14.3f}ms "
                f"{r['cycle_ms'] / r['read_ms']:>5.1f}x {r['refusal_ms']:>11.3f}ms "
                f"{r['refusal_ms'] / r['read_ms']:>5.1f}x "
                f"{r['takeover_ms']:>8.1f}/{r['takeover_max_ms']:.1f}ms  "
                f"< {target:g} ms: {verdict}"
            )
    for row in witness_rows:
        print(row)


if __name__ == "__main__":
    main()
