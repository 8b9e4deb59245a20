"""Event store benchmark: LMDB (coder_es.store.lmdb) against eventsourcing's SQLite file, POPO and
(when reachable) PostgreSQL, all measured in this one run, plus a raw py-lmdb commit of the same
bytes with the same sync flags as the physical floor.

    python3 bench/store.py            full sizes (about 2-4 minutes)
    python3 bench/store.py --quick    small sizes (smoke test)

Every figure is the median of several rounds; rounds of different backends are interleaved so a
slow moment of the disk does not favour one of them. Ratios are against SQLite file unless noted.
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing as mp
import os
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import lmdb
from eventsourcing.persistence import ApplicationRecorder, InfrastructureFactory, StoredEvent
from eventsourcing.utils import Environment

STATE = b'{"role":"assistant","text":"' + b"x" * 240 + b'"}'
TOPIC = "coder_es.domain.session:Session.ModelResponded"
PG: dict[str, Any] = {"host": "127.0.0.1", "port": 5432, "user": "postgres", "dbname": "test"}


@dataclass(frozen=True)
class Sizes:
    rounds: int
    single: int
    batches: int
    writer_batches: int
    session: int
    scan: int


QUICK = Sizes(rounds=3, single=60, batches=20, writer_batches=5, session=5_000, scan=20_000)
FULL = Sizes(rounds=5, single=600, batches=100, writer_batches=40, session=100_000, scan=1_000_000)
BATCH = 50
WRITERS = 4
PAGE = 500  # the page size eventsourcing's own subscriptions pull with


# -- backends ----------------------------------------------------------------------------------


def backend_env(kind: str, where: str, durable: bool, schema: str = "") -> dict[str, str]:
    if kind == "lmdb":
        return {
            "PERSISTENCE_MODULE": "coder_es.store.lmdb",
            "LMDB_PATH": where,
            "LMDB_DURABILITY": "durable" if durable else "crash_consistent",
        }
    if kind == "sqlite":
        return {
            "PERSISTENCE_MODULE": "eventsourcing.sqlite",
            "SQLITE_DBNAME": where,
            "SQLITE_LOCK_TIMEOUT": "60",
            "BENCH_SQLITE_SYNCHRONOUS": "FULL" if durable else "NORMAL",
        }
    if kind == "postgres":
        return {
            "PERSISTENCE_MODULE": "eventsourcing.postgres",
            "POSTGRES_DBNAME": PG["dbname"],
            "POSTGRES_HOST": PG["host"],
            "POSTGRES_PORT": str(PG["port"]),
            "POSTGRES_USER": PG["user"],
            "POSTGRES_PASSWORD": "",
            "POSTGRES_SCHEMA": schema,
            "POSTGRES_POOL_SIZE": "8",
        }
    return {"PERSISTENCE_MODULE": "eventsourcing.popo"}


def _patch_sqlite_synchronous() -> None:
    """eventsourcing's SQLite pool runs with SQLite's default synchronous=FULL (durable). For the
    crash-consistent rows the bench switches its connections to NORMAL, SQLite's WAL equivalent."""
    from eventsourcing import sqlite as es_sqlite

    if getattr(es_sqlite.SQLiteConnectionPool, "_bench_patched", False):
        return
    original = es_sqlite.SQLiteConnectionPool._create_connection

    def create(self: Any) -> Any:
        conn = original(self)
        conn._sqlite_conn.execute(f"PRAGMA synchronous={self._bench_synchronous}")
        return conn

    es_sqlite.SQLiteConnectionPool._create_connection = create  # type: ignore[method-assign]
    es_sqlite.SQLiteConnectionPool._bench_patched = True  # type: ignore[attr-defined]
    es_sqlite.SQLiteConnectionPool._bench_synchronous = "FULL"  # type: ignore[attr-defined]


def open_recorder(env: dict[str, str]) -> tuple[Any, ApplicationRecorder]:
    if env["PERSISTENCE_MODULE"] == "eventsourcing.sqlite":
        _patch_sqlite_synchronous()
        from eventsourcing import sqlite as es_sqlite

        es_sqlite.SQLiteConnectionPool._bench_synchronous = env["BENCH_SQLITE_SYNCHRONOUS"]  # type: ignore[attr-defined]
    factory = InfrastructureFactory.construct(Environment(env=env))
    return factory, factory.application_recorder()


def postgres_reachable() -> bool:
    try:
        with socket.create_connection((PG["host"], PG["port"]), timeout=1):
            pass
        import psycopg

        with psycopg.connect(**PG, connect_timeout=2):
            return True
    except Exception:
        return False


def pg_exec(sql: str) -> None:
    import psycopg

    with psycopg.connect(**PG, autocommit=True) as conn:
        conn.execute(sql)


# -- workloads -----------------------------------------------------------------------------


def events(oid: uuid.UUID, first: int, n: int) -> list[StoredEvent]:
    return [StoredEvent(oid, v, TOPIC, STATE) for v in range(first, first + n)]


def single_appends(recorder: ApplicationRecorder, n: int) -> float:
    oid = uuid.uuid4()
    batches = [events(oid, v, 1) for v in range(1, n + 1)]
    t = time.perf_counter()
    for b in batches:
        recorder.insert_events(b)
    return n / (time.perf_counter() - t)


def batched_appends(recorder: ApplicationRecorder, n: int) -> float:
    oid = uuid.uuid4()
    batches = [events(oid, 1 + i * BATCH, BATCH) for i in range(n)]
    t = time.perf_counter()
    for b in batches:
        recorder.insert_events(b)
    return n * BATCH / (time.perf_counter() - t)


def threaded_writers(recorder: ApplicationRecorder, n: int) -> float:
    plans = []
    for _ in range(WRITERS):
        oid = uuid.uuid4()
        plans.append([events(oid, 1 + i * BATCH, BATCH) for i in range(n)])
    barrier = threading.Barrier(WRITERS + 1)
    errors: list[BaseException] = []

    def run(plan: list[list[StoredEvent]]) -> None:
        barrier.wait()
        try:
            for b in plan:
                recorder.insert_events(b)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(p,)) for p in plans]
    for th in threads:
        th.start()
    barrier.wait()
    t = time.perf_counter()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]
    return WRITERS * n * BATCH / (time.perf_counter() - t)


def _process_writer(env: dict[str, str], n: int, ready: Any, go: Any, done: Any) -> None:
    factory, recorder = open_recorder(env)
    oid = uuid.uuid4()
    plan = [events(oid, 1 + i * BATCH, BATCH) for i in range(n)]
    recorder.insert_events(events(uuid.uuid4(), 1, 1))  # warm the connection / environment
    ready.release()
    go.wait()
    for b in plan:
        recorder.insert_events(b)
    done.put(time.perf_counter())
    factory.close()


def process_writers(env: dict[str, str], n: int) -> float:
    ctx = mp.get_context("spawn")
    ready = ctx.Semaphore(0)
    go = ctx.Event()
    done = ctx.Queue()
    procs = [
        ctx.Process(target=_process_writer, args=(env, n, ready, go, done)) for _ in range(WRITERS)
    ]
    for p in procs:
        p.start()
    try:
        for _ in procs:
            if not ready.acquire(timeout=120):
                msg = f"a writer process did not start (exit codes {[p.exitcode for p in procs]})"
                raise RuntimeError(msg)
        t = time.perf_counter()
        go.set()
        ends = [done.get(timeout=600) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
    return WRITERS * n * BATCH / (max(ends) - t)


def load(
    recorder: ApplicationRecorder, oid: uuid.UUID | None, total: int, chunk: int = 1000
) -> None:
    version = 1
    while version <= total:
        n = min(chunk, total - version + 1)
        recorder.insert_events(events(oid or uuid.uuid4(), version if oid else 1, n))
        version += n


def read_session(recorder: ApplicationRecorder, oid: uuid.UUID, expect: int) -> float:
    t = time.perf_counter()
    got = recorder.select_events(oid)
    elapsed = time.perf_counter() - t
    assert len(got) == expect, (len(got), expect)
    return expect / elapsed


def scan_log(recorder: ApplicationRecorder, expect: int) -> float:
    t = time.perf_counter()
    start, seen = 0, 0
    while True:
        page = recorder.select_notifications(start, PAGE, inclusive_of_start=False)
        if not page:
            break
        seen += len(page)
        start = page[-1].id
    elapsed = time.perf_counter() - t
    assert seen == expect, (seen, expect)
    return seen / elapsed


def _single_n(recorder: ApplicationRecorder, n: int) -> float:
    return single_appends(recorder, n)


def _no_op(recorder: ApplicationRecorder) -> float:
    return 0.0


def read_rounds(
    results: Results,
    sizes: Sizes,
    kinds: list[str],
    fresh: Callable[[str, bool], dict[str, str]],
) -> None:
    """Load one store per backend (a session of ``sizes.session`` events, then single-event
    sessions up to ``sizes.scan``), then read the session and scan the log in rounds that visit
    every backend in turn, in alternating order."""
    opened: dict[str, tuple[Any, ApplicationRecorder]] = {}
    oid = uuid.uuid4()
    try:
        for kind in kinds:
            factory, recorder = opened[kind] = open_recorder(fresh(kind, False))
            t = time.perf_counter()
            load(recorder, oid, sizes.session)
            load(recorder, None, sizes.scan - sizes.session)
            elapsed = time.perf_counter() - t
            print(f"  loaded {sizes.scan} events into {kind} in {elapsed:.1f}s", flush=True)
        for r in range(sizes.rounds):
            for kind in kinds if r % 2 == 0 else kinds[::-1]:
                rate = read_session(opened[kind][1], oid, sizes.session)
                results.add("read 100k session", kind, rate)
        for r in range(max(2, sizes.rounds - 2)):
            for kind in kinds if r % 2 == 0 else kinds[::-1]:
                results.add("scan 1M log", kind, scan_log(opened[kind][1], sizes.scan))
    finally:
        for factory, _ in opened.values():
            factory.close()


# -- raw py-lmdb floor -------------------------------------------------------------------------


def raw_lmdb(
    where: str,
    commits: int,
    durable: bool,
    *,
    per_commit: int = 1,
    lmdb_default_flags: bool = False,
) -> float:
    """Events/s for the bytes our recorder writes (session index key + notification log row
    holding the state, layout coder.lmdb/3), committed by py-lmdb alone, ``per_commit`` events
    per transaction (spread over WRITERS sessions when more than one). Same flags as
    coder_es.store.lmdb: metasync off, plus a flush per commit if durable. With
    ``lmdb_default_flags`` it is LMDB's own durable default (sync + metasync) instead.

    With ``per_commit = WRITERS * BATCH`` it is the floor for the 4-writer row: a perfect group
    commit, every writer's batch in one transaction, with none of the recorder's work."""
    env = lmdb.open(where, map_size=1 << 30, max_dbs=8, metasync=lmdb_default_flags, sync=True)
    ndb = env.open_db(b"n")
    xdb = env.open_db(b"x")
    sessions = WRITERS if per_commit > 1 else 1
    okeys = [b"\x01" + uuid.uuid4().bytes for _ in range(sessions)]
    tid = (1).to_bytes(4, "big")
    each = per_commit // sessions
    nid = 0
    t = time.perf_counter()
    for c in range(commits):
        with env.begin(write=True) as txn:
            for okey in okeys:
                for i in range(c * each + 1, (c + 1) * each + 1):
                    nid += 1
                    v = (i + (1 << 63)).to_bytes(8, "big")
                    nk = nid.to_bytes(8, "big")
                    txn.put(okey + v + tid + nk, b"", db=xdb)
                    txn.put(nk + v + tid + okey, STATE, db=ndb, append=True)
        if durable and not lmdb_default_flags:
            env.sync(True)
    rate = commits * sessions * each / (time.perf_counter() - t)
    env.close()
    return rate


class DeviceCounters:
    """Flushes and bytes the block device under ``where`` has completed (/sys/dev/block/*/stat,
    fields 7 and 16), so the bench can show what a durable append costs the disk rather than
    assume it. Counts the whole device: other writers on the machine add to them."""

    def __init__(self, where: str) -> None:
        dev = os.stat(where).st_dev
        path = f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}"
        stat = os.path.join(path, "stat")
        if os.path.exists(os.path.join(path, "partition")):
            stat = os.path.join(os.path.dirname(os.path.realpath(path)), "stat")
        self.stat = stat if self._read(stat) is not None else None

    @staticmethod
    def _read(stat: str) -> tuple[int, int] | None:
        try:
            with open(stat) as f:
                fields = f.read().split()
        except OSError:
            return None
        if len(fields) < 17:
            return None  # kernels before 5.5 do not count flushes
        return int(fields[15]), int(fields[6]) * 512

    def measure(self, fn: Callable[[], float], appends: int) -> tuple[float, float, float] | None:
        """(rate, device flushes per append, bytes written per append) of ``fn``."""
        if self.stat is None:
            return None
        before = self._read(self.stat)
        rate = fn()
        after = self._read(self.stat)
        assert before is not None and after is not None
        return rate, (after[0] - before[0]) / appends, (after[1] - before[1]) / appends


# -- the run --------------------------------------------------------------------------------------


class Results:
    def __init__(self) -> None:
        self.samples: dict[tuple[str, str], list[float]] = {}

    def add(self, metric: str, backend: str, value: float) -> None:
        self.samples.setdefault((metric, backend), []).append(value)

    def median(self, metric: str, backend: str) -> float | None:
        values = self.samples.get((metric, backend))
        return statistics.median(values) if values else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    parser.add_argument("--dir", default=None, help="where to put the stores (a real disk)")
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--no-processes", action="store_true", help="skip process writers")
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL
    base = tempfile.mkdtemp(prefix="coder_es_bench_", dir=args.dir)
    kinds = ["lmdb", "sqlite", "popo"]
    schema = f"bench_{os.getpid()}"
    if not args.no_postgres and postgres_reachable():
        pg_exec(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        kinds.append("postgres")
    results = Results()
    counter = iter(range(1_000_000))

    def fresh(kind: str, durable: bool) -> dict[str, str]:
        i = next(counter)
        where = os.path.join(base, f"{kind}{i}" + (".sqlite" if kind == "sqlite" else ""))
        sch = f"{schema}_{i}"
        if kind == "postgres":
            pg_exec(f"CREATE SCHEMA {sch}")
        return backend_env(kind, where, durable, sch)

    def with_recorder(env: dict[str, str], fn: Callable[[ApplicationRecorder], float]) -> float:
        factory, recorder = open_recorder(env)
        try:
            return fn(recorder)
        finally:
            factory.close()

    print(f"store benchmark ({'quick' if args.quick else 'full'}), stores under {base}")
    print(f"backends: {', '.join(kinds)}; {sizes.rounds} rounds each, medians reported\n")
    try:
        device = DeviceCounters(base)
        for r in range(sizes.rounds):
            for durable in (True, False):
                mode = "durable" if durable else "crash_consistent"
                for kind in kinds:
                    if kind == "popo" and not durable:
                        continue
                    env = fresh(kind, durable)
                    n = sizes.single if kind != "popo" else sizes.single * 20
                    run = functools.partial(with_recorder, env, functools.partial(_single_n, n=n))
                    measured = device.measure(run, n) if durable and kind != "popo" else None
                    if measured is None:
                        results.add(f"single {mode}", kind, run())
                    else:
                        results.add(f"single {mode}", kind, measured[0])
                        results.add("flushes per durable append", kind, measured[1])
                        results.add("KiB written per durable append", kind, measured[2] / 1024)
                results.add(
                    f"single {mode}",
                    "raw py-lmdb",
                    raw_lmdb(os.path.join(base, f"raw{next(counter)}"), sizes.single, durable),
                )
            results.add(
                "single durable",
                "raw py-lmdb (LMDB default flags)",
                raw_lmdb(
                    os.path.join(base, f"raw{next(counter)}"),
                    sizes.single,
                    True,
                    lmdb_default_flags=True,
                ),
            )
            results.add(
                "4 writers (threads)",
                "raw py-lmdb",
                raw_lmdb(
                    os.path.join(base, f"raw{next(counter)}"),
                    sizes.writer_batches,
                    True,
                    per_commit=WRITERS * BATCH,
                ),
            )
            for kind in kinds:
                env = fresh(kind, True)
                results.add(
                    "batched 50",
                    kind,
                    with_recorder(env, lambda rec: batched_appends(rec, sizes.batches)),
                )
                env = fresh(kind, True)
                results.add(
                    "4 writers (threads)",
                    kind,
                    with_recorder(env, lambda rec: threaded_writers(rec, sizes.writer_batches)),
                )
                if kind in ("lmdb", "sqlite") and not args.no_processes and r < 3:
                    env = fresh(kind, True)
                    with_recorder(env, _no_op)  # create tables before the race
                    results.add(
                        "4 writers (processes)", kind, process_writers(env, sizes.writer_batches)
                    )
            print(f"  round {r + 1}/{sizes.rounds} of write benchmarks done", flush=True)

        # Reads: one store per backend, loaded once, then read in rounds that take the backends
        # in turns, so a slow moment of the machine does not fall on one backend's reads only.
        # POPO keeps its million events as Python objects, which every collection of the cyclic
        # GC would walk during the others' reads: it is read on its own afterwards.
        stored = [k for k in kinds if k != "popo"]
        read_rounds(results, sizes, stored, fresh)
        if "popo" in kinds:
            read_rounds(results, sizes, ["popo"], fresh)
    finally:
        shutil.rmtree(base, ignore_errors=True)
        if "postgres" in kinds:
            import psycopg

            with psycopg.connect(**PG, autocommit=True) as conn:
                rows = conn.execute(
                    "SELECT nspname FROM pg_namespace WHERE nspname LIKE %s", (f"{schema}%",)
                ).fetchall()
                for (name,) in rows:
                    conn.execute(f"DROP SCHEMA {name} CASCADE")

    report(results, kinds, sizes)
    return 0


TARGETS = {
    "single durable": ("sqlite", 1.3),
    "4 writers (threads)": ("sqlite", 3.0),
    "4 writers (processes)": ("sqlite", 3.0),
    "read 100k session": ("sqlite", 5.5),
    "scan 1M log": ("sqlite", 8.0),
}


RAW_LABELS = {
    "4 writers (threads)": "raw py-lmdb, all 4 batches per commit",
}


def report(results: Results, kinds: list[str], sizes: Sizes) -> None:
    metrics = [
        ("single durable", "single-event appends/s, durable"),
        ("single crash_consistent", "single-event appends/s, crash-consistent"),
        ("batched 50", "events/s in 50-event batches (durable)"),
        ("4 writers (threads)", f"events/s, {WRITERS} writer threads x 50-event batches"),
        ("4 writers (processes)", f"events/s, {WRITERS} writer processes x 50-event batches"),
        ("read 100k session", f"events/s reading a {sizes.session}-event session"),
        ("scan 1M log", f"events/s scanning a {sizes.scan}-event notification log"),
    ]
    print()
    for metric, title in metrics:
        base = results.median(metric, "sqlite")
        lm = results.median(metric, "lmdb")
        print(f"{title}")
        rows = [*kinds, "raw py-lmdb", "raw py-lmdb (LMDB default flags)"]
        for backend in rows:
            value = results.median(metric, backend)
            if value is None:
                continue
            ratio = f"  {value / base:6.2f}x sqlite" if base else ""
            label = RAW_LABELS.get(metric, backend) if backend == "raw py-lmdb" else backend
            print(f"  {label:38s} {value:12,.0f}{ratio}")
        raw = results.median(metric, "raw py-lmdb")
        if lm and raw:
            goal = f"  (target >= {1 / 1.3:.2f})" if metric == "single durable" else ""
            print(f"  lmdb / raw py-lmdb                     {lm / raw:12.2f}{goal}")
        target = TARGETS.get(metric)
        if target and lm and base:
            ok = "MET" if lm / base >= target[1] else "MISSED"
            print(f"  target: lmdb >= {target[1]}x sqlite: {lm / base:.2f}x -> {ok}")
        print()
    if results.median("flushes per durable append", "sqlite") is not None:
        print("what one durable single-event append costs the disk (block device counters)")
        for backend in kinds:
            flushes = results.median("flushes per durable append", backend)
            written = results.median("KiB written per durable append", backend)
            if flushes is not None and written is not None:
                print(f"  {backend:38s} {flushes:6.2f} flushes {written:8.1f} KiB written")
        print()


if __name__ == "__main__":
    raise SystemExit(main())
