"""Audit-trail benchmark: verifying a large store, exporting a 10k-event session to JSONL.

Targets: verify 1M events in under 10 s; export a 10k-event session to JSONL in under 1 s.
Each figure is a median over several runs, printed with a ratio against a baseline measured in the
same process on the same data:

- verify:  ``verify_store`` (recompute every chain hash + link checks), split across the CPUs
  (the default) and in one process (``workers=1``), against reading the same events without
  verifying (paging the notification log) plus a raw sha256 over the stored bytes; also shown, the
  standard-library hashing (``EventDecoder.link``) of the same events, which verify used before
  ``coder_es.audit.fastlink``;
- export:  ``export_session(format="jsonl")`` against reading the session's stored events.

Run:  python3 bench/audit.py [--events 1000000] [--sessions 100] [--backend lmdb|sqlite|popo]
      [--runs 3] [--skip-export]
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from coder_es.application import CoderApp
from coder_es.audit.export import ExportOptions, export_session
from coder_es.audit.records import EventDecoder
from coder_es.audit.segments import PARALLEL_MIN_EVENTS, can_split, read_pages, worker_count
from coder_es.audit.verify import verify_store
from coder_es.domain.session import Session
from coder_es.store.config import StoreConfig


def fill_session(app: CoderApp, events: int) -> Any:
    """A session of ``events`` events, shaped like real turns (messages, tool calls, results)."""
    session = Session.start(workspace="/bench", title="bench", model="m")
    batch: list[Any] = []

    def flush() -> None:
        stored = [app.mapper.to_stored_event(e) for e in session.collect_events()]
        app.recorder.insert_events(stored)

    i = 0
    while session.version < events:
        step = i % 4
        if step == 0:
            session.add_user_message(f"please change function number {i} to handle empty input")
        elif step == 1:
            node = session.record_model_response(
                blocks=[
                    {
                        "type": "tool_use",
                        "id": f"t{i}",
                        "name": "read",
                        "input": {"path": f"src/mod{i % 50}.py"},
                    }
                ],
                stop_reason="tool_use",
                usage={"input_tokens": 900 + i % 7, "output_tokens": 40},
                provider="scripted",
                model="m",
            )
            session.request_tool_call(
                node=node, tool_use_id=f"t{i}", name="read", input={"path": f"src/mod{i % 50}.py"}
            )
        elif step == 2:
            session.complete_tool_call(
                tool_use_id=f"t{i - 1}",
                name="read",
                output="def f(x):\n    return x\n" * 3,
                duration_ms=2,
            )
        else:
            session.decide_permission(
                tool_use_id=f"t{i}", tool="bash", subject="pytest -q", decision="allow"
            )
        i += 1
        if len(session.pending_events) >= 2000:
            flush()
    flush()
    del batch
    return session.id


def median_time(fn: Callable[[], Any], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def read_all_raw(app: CoderApp) -> int:
    """The baseline: page through the notification log and sha256 every stored state."""
    n, start = 0, 1
    while True:
        batch = app.recorder.select_notifications(start=start, limit=5000)
        for stored in batch:
            hashlib.sha256(stored.state).digest()
            n += 1
        if len(batch) < 5000:
            return n
        start = batch[-1].id + 1


def read_pages_raw(app: CoderApp) -> int:
    """A second baseline: the reader verify itself uses (on SQLite it builds one UUID per session
    rather than per row, which the recorder's ``select_notifications`` does) plus sha256."""
    n = 0
    for page in read_pages(app, 1, None):
        for stored in page:
            hashlib.sha256(stored.state).digest()
            n += 1
    return n


def link_all_stdlib(app: CoderApp) -> int:
    """The hashing verify did before: standard-library decode, sorted re-encode, sha256."""
    link = EventDecoder(app.mapper).link
    n, start = 0, 1
    while True:
        batch = app.recorder.select_notifications(start=start, limit=5000)
        for stored in batch:
            link(stored)
            n += 1
        if len(batch) < 5000:
            return n
        start = batch[-1].id + 1


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--backend", default="lmdb", choices=["lmdb", "sqlite", "popo"])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip-export", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        app = CoderApp(StoreConfig(backend=args.backend, path=Path(tmp), durable=False))
        try:
            started = time.perf_counter()
            per = args.events // args.sessions
            ids = [fill_session(app, per) for _ in range(args.sessions)]
            print(
                f"backend={args.backend}: wrote {per * args.sessions} events in "
                f"{args.sessions} sessions in {time.perf_counter() - started:.1f}s"
            )

            total = per * args.sessions
            report: list[Any] = []
            verify = median_time(
                lambda: report.append(verify_store(app, check_blobs=False)), args.runs
            )
            assert report[-1].ok and report[-1].events == total, report[-1].problems
            single = median_time(
                lambda: report.append(verify_store(app, check_blobs=False, workers=1)), args.runs
            )
            assert report[-1].ok and report[-1].events == total, report[-1].problems
            raw = median_time(lambda: read_all_raw(app), args.runs)
            own = median_time(lambda: read_pages_raw(app), args.runs)
            stdlib = median_time(lambda: link_all_stdlib(app), args.runs)
            per_m = 1_000_000 / total
            procs = worker_count() if can_split(app) and total >= PARALLEL_MIN_EVENTS else 1
            print(
                f"baseline read+sha256 {total} events: median {raw:.2f}s "
                f"(verify's own reader + sha256: {own:.2f}s)"
            )
            print(
                f"verify --all, {procs} process(es): median {verify:.2f}s "
                f"({total / verify / 1e6:.2f}M events/s); ratio {verify / raw:.2f}x baseline; "
                f"target < 10 s for 1M: {'met' if verify * per_m < 10 else 'MISSED'} "
                f"({verify * per_m:.2f}s per 1M)"
            )
            print(
                f"verify --all, 1 process: median {single:.2f}s; ratio {single / raw:.2f}x "
                f"baseline; {'met' if single * per_m < 10 else 'MISSED'} "
                f"({single * per_m:.2f}s per 1M); {single / own:.2f}x its own reader + sha256"
            )
            print(
                f"read + stdlib hashing (verify's hashing before fastlink): median "
                f"{stdlib:.2f}s; ratio {stdlib / raw:.2f}x baseline"
            )
            if args.skip_export:
                return

            big = fill_session(app, 10_000)
            export = median_time(
                lambda: export_session(app, big, ExportOptions(format="jsonl")), args.runs + 2
            )
            read = median_time(lambda: list(app.recorder.select_events(big)), args.runs + 2)
            size = len(export_session(app, big, ExportOptions(format="jsonl")))
            print(
                f"export jsonl 10k events ({size / 1e6:.1f} MB): median {export:.3f}s; "
                f"baseline read events {read:.3f}s; ratio {export / read:.1f}x; "
                f"target < 1 s: {'met' if export < 1 else 'MISSED'}"
            )
            del ids
        finally:
            app.close()


if __name__ == "__main__":
    main()
