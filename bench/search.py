"""Search benchmark: indexing rate, query latency on 1M events, and a scan baseline.

1. Indexing: N synthetic events (default 1,000,000: user messages, assistant text, tool inputs and
   outputs, changed paths; words drawn from a Zipf-distributed vocabulary of 30,000) fed to the
   FTS5 index the way ``catch_up`` feeds it (batches of notification entries). Target >= 20k/s.
2. Query latency on that index: 300 queries (rare, common and mixed words, two-word queries,
   phrases), each with snippet and ranking, p50 and p99. Targets p50 < 20 ms, p99 < 100 ms.
   Baseline in the same run: the same queries as a ``LIKE '%word%'`` scan over a plain table of a
   smaller slice (default 100k rows), scaled to N rows, reported as a ratio.
3. The real event-to-index path: a real LMDB store with recorded sessions (default 5,000 events),
   indexed by ``catch_up`` (reading the log, decoding events, reading blobs): events/s.

Timings are given twice: wall-clock, and CPU time (of the process while indexing, of the thread
while querying). On a machine shared with other work (the load average is printed) the wall-clock
figures measure the neighbours too; the CPU-time ones are what the work itself costs.

4. Optionally (``--postgres N``) the fleet engine: N of the same events indexed into PostgreSQL
   (tsvector + GIN, in a scratch schema of the local server) and the same queries.

Run:  python3 bench/search.py [--events 1000000] [--slice 100000] [--real 5000] [--postgres N]
      [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import statistics
import string
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from coder_es.application import CoderApp  # noqa: E402
from coder_es.store.config import StoreConfig  # noqa: E402
from projections.search.documents import Doc, Entries  # noqa: E402
from projections.search.index import catch_up, open_index  # noqa: E402
from projections.search.query import Filters, Query  # noqa: E402
from projections.search.sqlite_index import SQLiteSearchIndex  # noqa: E402

KINDS = ("user", "assistant", "tool", "tool", "file")


def vocabulary(rng: random.Random, size: int = 30_000) -> list[str]:
    words = set()
    while len(words) < size:
        words.add("".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 10))))
    return sorted(words)


def synthetic(n: int, seed: int = 7) -> tuple[list[str], list[list[Doc]]]:
    rng = random.Random(seed)
    vocab = vocabulary(rng)
    weights = [1 / (i + 1) for i in range(len(vocab))]  # Zipf: a few words are everywhere
    sessions = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(2000)]
    drawn = iter(rng.choices(vocab, weights=weights, k=n * 24))
    events = []
    for i in range(n):
        kind = KINDS[i % len(KINDS)]
        if kind == "file":
            text = "src/" + "/".join(next(drawn) for _ in range(3)) + ".py"
        else:
            text = " ".join(next(drawn) for _ in range(rng.randint(8, 40)))
        doc = Doc(
            sessions[i % len(sessions)], i // len(sessions) + 1, str(i), kind, 1.7e9 + i, text
        )
        events.append([doc])
    return vocab, events


def queries(vocab: list[str], rng: random.Random, n: int = 300) -> list[str]:
    out = []
    for i in range(n):
        pick = i % 5
        if pick == 0:
            out.append(rng.choice(vocab[:50]))  # among the most common words
        elif pick == 1:
            out.append(rng.choice(vocab[5000:]))  # rare
        elif pick == 2:
            out.append(f"{rng.choice(vocab[:200])} {rng.choice(vocab[200:3000])}")
        elif pick == 3:
            out.append(f'"{rng.choice(vocab[:100])} {rng.choice(vocab[:100])}"')
        else:
            out.append(rng.choice(vocab[300:5000]))
    return out


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def bench_index(events: list[list[Doc]], path: Path) -> tuple[SQLiteSearchIndex, float, float]:
    """The index, and events per second of wall-clock time and of CPU time."""
    index = SQLiteSearchIndex(path)
    start, cpu = time.perf_counter(), time.process_time()
    batch: Entries = []
    for i, docs in enumerate(events, 1):
        batch.append((i, docs))
        if len(batch) == 5000:
            index.add(batch)
            batch = []
    index.add(batch)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return index, len(events) / wall, len(events) / cpu


def bench_queries(index: SQLiteSearchIndex, texts: list[str]) -> tuple[list[float], list[float]]:
    """Milliseconds per query: wall-clock, and CPU time of the querying thread."""
    wall, cpu = [], []
    for text in texts:
        query = Query.parse(text)
        start, cpu_start = time.perf_counter(), time.thread_time()
        index.search(query, Filters(limit=20))
        wall.append((time.perf_counter() - start) * 1000)
        cpu.append((time.thread_time() - cpu_start) * 1000)
    return wall, cpu


def bench_scan(events: list[list[Doc]], texts: list[str], rows: int) -> list[float]:
    """The same queries as LIKE scans over ``rows`` plain rows (the no-index way)."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE plain (text TEXT, session TEXT, kind TEXT)")
    conn.executemany(
        "INSERT INTO plain VALUES (?, ?, ?)",
        ((d.text, d.session, d.kind) for docs in events[:rows] for d in docs),
    )
    times = []
    for text in texts[:60]:
        words = Query.parse(text).terms()
        where = " AND ".join("text LIKE ?" for _ in words)
        start = time.perf_counter()
        conn.execute(
            f"SELECT session, kind, text FROM plain WHERE {where} LIMIT 20",
            [f"%{w}%" for w in words],
        ).fetchall()
        times.append((time.perf_counter() - start) * 1000)
    return times


def bench_real(n_events: int, where: Path) -> tuple[int, float, float]:
    """A real LMDB store: turns recorded through the application, indexed by ``catch_up``."""
    app = CoderApp(StoreConfig("lmdb", where, durable=False))
    rng = random.Random(3)
    vocab = vocabulary(rng, 5000)
    recorded = 0
    sid = app.start_session(workspace=str(where)).id
    while recorded < n_events:
        session = app.get_session(sid)
        for _ in range(20):
            node = session.add_user_message(" ".join(rng.choices(vocab, k=20)))
            session.record_model_response(
                blocks=[{"type": "text", "text": " ".join(rng.choices(vocab, k=30))}],
                stop_reason="tool_use",
                usage={},
                provider="scripted",
                model="m",
            )
            session.request_tool_call(
                node=node, tool_use_id="t", name="bash", input={"command": rng.choice(vocab)}
            )
            session.complete_tool_call(
                tool_use_id="t",
                name="bash",
                output=" ".join(rng.choices(vocab, k=40)),
                files_changed=[{"path": f"src/{rng.choice(vocab)}.py"}],
            )
            recorded += 4
        app.save(session)
    index = open_index(app)
    start, cpu = time.perf_counter(), time.process_time()
    indexed = catch_up(app, index)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    index.close()
    app.close()
    return indexed, indexed / wall, indexed / cpu


def bench_postgres(events: list[list[Doc]], texts: list[str]) -> dict[str, Any]:
    """The fleet engine on the local PostgreSQL, in a scratch schema: rate and latency."""
    import psycopg

    from projections.search.postgres_index import PostgresSearchIndex

    schema = f"bench_search_{uuid.uuid4().hex[:8]}"
    settings = {
        "POSTGRES_DBNAME": os.environ.get("POSTGRES_DBNAME", "test"),
        "POSTGRES_HOST": os.environ.get("POSTGRES_HOST", "127.0.0.1"),
        "POSTGRES_PORT": os.environ.get("POSTGRES_PORT", "5432"),
        "POSTGRES_USER": os.environ.get("POSTGRES_USER", "postgres"),
        "POSTGRES_PASSWORD": os.environ.get("POSTGRES_PASSWORD", ""),
        "POSTGRES_SCHEMA": schema,
    }
    conninfo = {k.removeprefix("POSTGRES_").lower(): v for k, v in settings.items()}
    conninfo.pop("schema")
    with psycopg.connect(**conninfo, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        index = PostgresSearchIndex(StoreConfig("postgres", Path("."), extra=settings))
        start = time.perf_counter()
        for at in range(0, len(events), 5000):
            index.add([(at + i + 1, docs) for i, docs in enumerate(events[at : at + 5000])])
        rate = len(events) / (time.perf_counter() - start)
        times = []
        for text in texts:
            begin = time.perf_counter()
            index.search(Query.parse(text), Filters(limit=20))
            times.append((time.perf_counter() - begin) * 1000)
        index.close()
    finally:
        with psycopg.connect(**conninfo, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
    return {
        "postgres_events": len(events),
        "postgres_index_events_per_s_wall": round(rate),
        "postgres_query_p50_ms_wall": round(percentile(times, 50), 2),
        "postgres_query_p99_ms_wall": round(percentile(times, 99), 2),
    }


def run(n: int, slice_rows: int, real: int, postgres: int = 0) -> dict[str, Any]:
    vocab, events = synthetic(n)
    texts = queries(vocab, random.Random(11))
    with tempfile.TemporaryDirectory() as tmp:
        index, rate, cpu_rate = bench_index(events, Path(tmp) / "search.sqlite")
        bench_queries(index, texts[:20])  # warm the page cache like a second search would
        wall, cpu = bench_queries(index, texts)
        index.close()
        scan = bench_scan(events, texts, slice_rows)
        real_events, real_rate, real_cpu_rate = bench_real(real, Path(tmp) / "real")
    scan_per_n = statistics.median(scan) * n / slice_rows
    extra = bench_postgres(events[:postgres], texts) if postgres else {}
    return {
        "events": n,
        "load_average_1min": round(os.getloadavg()[0], 1),
        "cpus": os.cpu_count(),
        "index_events_per_s_wall": round(rate),
        "index_events_per_cpu_s": round(cpu_rate),
        "query_p50_ms_wall": round(percentile(wall, 50), 2),
        "query_p99_ms_wall": round(percentile(wall, 99), 2),
        "query_p50_ms_cpu": round(percentile(cpu, 50), 2),
        "query_p99_ms_cpu": round(percentile(cpu, 99), 2),
        "scan_slice_rows": slice_rows,
        "scan_median_ms_on_slice": round(statistics.median(scan), 2),
        "scan_median_ms_scaled_to_n": round(scan_per_n, 1),
        "scan_over_index_ratio_p50_wall": round(scan_per_n / percentile(wall, 50), 1),
        "real_path_events": real_events,
        "real_path_events_per_s_wall": round(real_rate),
        "real_path_events_per_cpu_s": round(real_cpu_rate),
        **extra,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--slice", type=int, default=100_000)
    parser.add_argument("--real", type=int, default=5000)
    parser.add_argument(
        "--postgres", type=int, default=0, help="also index this many events in PostgreSQL"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args.events, args.slice, args.real, args.postgres)
    if args.json:
        print(json.dumps(result))
        return
    for key, value in result.items():
        print(f"{key:32} {value}")


if __name__ == "__main__":
    main()
