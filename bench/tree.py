"""Branching benchmarks: fork/label cost vs history size, opening a 100k-event session, switch
cost vs workspace size, and storage per turn for one-line edits of a 100 KB file.

    python3 bench/tree.py [--backend sqlite|lmdb] [--quick]
    python3 bench/tree.py --cli-edits 500     only the whole-session storage scenario (coder-es run)

Every figure is a median over repetitions, printed with its ratio to a baseline measured in the
same run. Targets (from the issue): fork/label ratio 100k vs 10 events <= 1.5; opening 100k events
< 300 ms; 10 differing files in a 10k-file workspace < 100 ms; 500 one-line turns on a 100 KB file
< 2 MB and any version read back < 10 ms.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import UUID

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from coder_es.application import CoderApp
from coder_es.branching import Branching
from coder_es.domain.session import Session
from coder_es.store.config import StoreConfig
from projections.tree import ConversationTree, track_tree

BATCH = 500  # events per save: a multiple of the snapshot interval


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def median_ms(fn: Callable[[], Any], reps: int, setup: Callable[[], Any] | None = None) -> float:
    times = []
    for rep in range(reps + 2):
        if setup is not None:
            setup()
        t0 = time.perf_counter()
        fn()
        if rep >= 2:  # two warm-up runs
            times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def pick_backend(requested: str | None, root: Path) -> str:
    if requested:
        return requested
    try:
        app = CoderApp(StoreConfig(backend="lmdb", path=root / "probe"))
        app.close()
        return "lmdb"
    except Exception:  # the LMDB backend is not finished: measure on SQLite
        return "sqlite"


def open_app(backend: str, path: Path) -> CoderApp:
    return CoderApp(StoreConfig(backend=backend, path=path, durable=False))


# ---------------------------------------------------------------------- building histories


def grow(app: CoderApp, sid: UUID, ws: Path, events: int) -> None:
    """Append whole turns (user, model, tool request, permission, edit, tool result) until the
    session has at least ``events`` events."""
    files = sorted(p.name for p in ws.iterdir())
    turn = 0
    session = app.get_session(sid)
    while session.version < events or session.version % 6 != 0:
        target = max(events, (session.version // BATCH + 1) * BATCH)
        target = min(target, (session.version // BATCH + 1) * BATCH)
        while session.version < target and (session.version < events or session.version % 6):
            turn += 1
            step = session.version % 6
            if step == 0:
                session.add_user_message(f"turn {turn}")
            elif step == 1:
                session.record_model_response(
                    blocks=[{"type": "tool_use", "id": f"t{turn}", "name": "edit", "input": {}}],
                    stop_reason="tool_use",
                    usage={"in": 10},
                    provider="scripted",
                    model="m",
                )
            elif step == 2:
                session.request_tool_call(
                    node=session.head or "", tool_use_id=f"t{turn}", name="edit", input={}
                )
            elif step == 3:
                session.decide_permission(
                    tool_use_id=f"t{turn}", tool="edit", subject="f", decision="allow"
                )
            elif step == 4 and files:
                name = files[turn % len(files)]
                old = (ws / name).read_bytes()
                new = old + b"x"
                session.apply_edit(
                    path=name,
                    base=sha(old),
                    disk=sha(old),
                    proposed=sha(new),
                    result=sha(new),
                    outcome="direct",
                )
                (ws / name).write_bytes(new)
                app.blobs.put(new, like=sha(old))
            else:
                session.complete_tool_call(tool_use_id=f"t{turn}", name="edit", output="ok")
        app.save(session)


def make_session(app: CoderApp, ws: Path, files: int, events: int) -> UUID:
    ws.mkdir(parents=True, exist_ok=True)
    changed = []
    for i in range(files):
        data = b"file %d\n" % i
        (ws / f"f{i:05}.txt").write_bytes(data)
        app.blobs.put(data)
        changed.append({"path": f"f{i:05}.txt", "before": None, "after": sha(data)})
    session = app.start_session(workspace=str(ws))
    session.add_user_message("create the files")
    session.complete_tool_call(tool_use_id="t0", name="bash", output="", files_changed=changed)
    app.save(session)
    grow(app, session.id, ws, events)
    return session.id


# ---------------------------------------------------------------------- benchmarks


def bench_fork_label(backend: str, root: Path, sizes: list[int], reps: int) -> dict[int, tuple]:
    """Sessions of every size are measured in turns (round-robin), so that disk noise and
    machine load hit every size alike."""
    cases = []
    for size in sizes:
        app = open_app(backend, root / f"fl{size}")
        sid = make_session(app, root / f"fl{size}-ws", 20, size)
        branching = Branching(app, root / f"fl{size}-ws")
        branching.views(sid)
        branching.checkpoint()
        head = app.get_session(sid).head or ""
        cases.append((size, app, sid, branching, head, one_change_back(branching, sid, head)))
    forks: dict[int, list[float]] = {size: [] for size in sizes}
    labels: dict[int, list[float]] = {size: [] for size in sizes}
    for rep in range(reps + 2):
        for size, _app, sid, branching, head, back in cases:
            branching.checkout(sid, head)
            t0 = time.perf_counter()
            branching.fork(sid, back)
            t1 = time.perf_counter()
            branching.label(sid, head, f"l{rep}")
            t2 = time.perf_counter()
            if rep >= 2:
                forks[size].append((t1 - t0) * 1000)
                labels[size].append((t2 - t1) * 1000)
    for case in cases:
        case[1].close()
    return {
        size: (statistics.median(forks[size]), statistics.median(labels[size])) for size in sizes
    }


def one_change_back(branching: Branching, sid: UUID, head: str) -> str:
    """The parent of the newest node on the head's path that changed files: one file differs."""
    files, tree = branching.files(sid), branching.tree(sid)
    for node in reversed(tree.path(head)):
        if files.changed_at(node):
            parent = tree.parent_of(node)
            assert parent is not None and len(files.diff(parent, head)) == 1
            return parent
    raise AssertionError("no file change in the history")


def bench_open(backend: str, root: Path, events: int, reps: int) -> tuple[float, float]:
    path = root / "open"
    app = open_app(backend, path)
    sid = make_session(app, root / "open-ws", 20, events)
    branching = Branching(app, root / "open-ws")
    branching.views(sid)
    branching.checkpoint()
    app.close()

    def tracked_open() -> ConversationTree:
        fresh = open_app(backend, path)  # a new process: no aggregate cache
        try:
            fresh.get_session(sid)
            tree = track_tree(fresh, sid).catch_up()
            assert len(tree) > events // 3
            return tree
        finally:
            fresh.close()

    def full_replay() -> ConversationTree:
        fresh = open_app(backend, path)
        try:
            stored = list(fresh.events.get(sid))
            session: Session | None = None
            for event in stored:
                session = event.mutate(session)  # type: ignore[attr-defined]
            tree = ConversationTree()
            for event in stored:
                tree.apply(event)
            assert session is not None and session.version >= events
            return tree
        finally:
            fresh.close()

    return median_ms(tracked_open, reps), median_ms(full_replay, max(1, reps // 3))


def setup_switch(
    backend: str, root: Path, files: int, history: int
) -> tuple[CoderApp, Callable[[], float]]:
    ws = root / f"sw{files}-{history}-ws"
    app = open_app(backend, root / f"sw{files}-{history}")
    sid = make_session(app, ws, files, history)
    # Two branches from the same node that each change the same 10 files differently.
    session = app.get_session(sid)
    fork_point = session.head
    tips = []
    for branch in range(2):
        session = app.get_session(sid)
        session.move_head(fork_point, reason="fork")
        session.add_user_message(f"branch {branch}")
        for i in range(10):
            name = f"f{i * (files // 10):05}.txt"
            old = (ws / name).read_bytes()
            new = old + b"branch %d\n" % branch
            app.blobs.put(new, like=sha(old))
            session.apply_edit(
                path=name,
                base=sha(old),
                disk=sha(old),
                proposed=sha(new),
                result=sha(new),
                outcome="direct",
            )
            (ws / name).write_bytes(new)
        tips.append(session.complete_tool_call(tool_use_id=f"b{branch}", name="edit", output=""))
        app.save(session)
        if branch == 0:
            Branching(app, ws).checkout(sid, fork_point or "")
    branching = Branching(app, ws)
    branching.views(sid)
    branching.checkpoint()
    flip = iter(range(10**6))

    def switch() -> float:
        t0 = time.perf_counter()
        result = branching.checkout(sid, tips[next(flip) % 2])
        elapsed = (time.perf_counter() - t0) * 1000
        assert len(result.files) == 10 and not result.conflicts
        return elapsed

    return app, switch


def bench_switches(
    backend: str, root: Path, configs: list[tuple[int, int]], reps: int
) -> list[float]:
    """Median switch time per (workspace files, history events), measured round-robin."""
    cases = [setup_switch(backend, root, files, history) for files, history in configs]
    times: list[list[float]] = [[] for _ in cases]
    for rep in range(reps + 2):
        for i, (_app, switch) in enumerate(cases):
            ms = switch()
            if rep >= 2:
                times[i].append(ms)
    for app, _switch in cases:
        app.close()
    return [statistics.median(t) for t in times]


def bench_storage(backend: str, root: Path, turns: int, reps: int) -> dict[str, float]:
    rng = random.Random(7)
    words = [
        "def",
        "return",
        "self",
        "value",
        "index",
        "result",
        "items",
        "for",
        "in",
        "if",
        "None",
        "data",
        "path",
        "config",
        "node",
        "event",
        "session",
        "=",
        "(",
        ")",
        ":",
    ]
    lines: list[str] = []
    while sum(len(x) for x in lines) < 100_000:
        lines.append(" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) + "\n")
    ws = root / "st-ws"
    ws.mkdir()
    path = root / "st"
    app = open_app(backend, path)
    sid = make_session(app, ws, 0, 0)
    size_before = store_bytes(path)
    data = "".join(lines).encode()
    app.blobs.put(data)
    digests = [sha(data)]
    (ws / "big.py").write_bytes(data)
    blob_bytes = 0
    t0 = time.perf_counter()
    for turn in range(turns):
        i = rng.randrange(len(lines))
        lines[i] = f"edited {turn} " + lines[i]
        new = "".join(lines).encode()
        prev = digests[-1]
        digest = app.blobs.put(new, like=prev)
        blob_bytes += app.blobs.stored_size(digest)
        (ws / "big.py").write_bytes(new)
        digests.append(digest)

        def turn_events(s: Session, prev: str = prev, digest: str = digest, t: int = turn) -> None:
            s.add_user_message(f"edit line {t}")
            s.apply_edit(
                path="big.py",
                base=prev,
                disk=prev,
                proposed=digest,
                result=digest,
                outcome="direct",
            )
            s.complete_tool_call(tool_use_id=f"t{t}", name="edit", output="ok")

        app.update(sid, turn_events)
    write_s = time.perf_counter() - t0
    app.close()
    added = store_bytes(path) - size_before
    app = open_app(backend, path)
    picks = [digests[rng.randrange(len(digests))] for _ in range(reps)]
    read_times = []
    for digest in picks:
        t = time.perf_counter()
        app.blobs.get(digest)
        read_times.append((time.perf_counter() - t) * 1000)
    app.close()
    return {
        "store_bytes_added": added,
        "blob_bytes": blob_bytes,
        "full_copy_bytes": len(data) * turns,
        "bytes_per_turn": added / turns,
        "read_median_ms": statistics.median(read_times),
        "read_max_ms": max(read_times),
        "write_ms_per_turn": write_s * 1000 / turns,
    }


def lmdb_db_bytes(path: Path) -> dict[str, int]:
    """Bytes of pages each named LMDB database of the store at ``path`` holds."""
    import lmdb

    env = lmdb.open(str(path / "lmdb"), readonly=True, lock=False, max_dbs=64)
    try:
        with env.begin() as txn:
            names = [key for key, _ in txn.cursor()]
        out = {}
        for name in names:
            db = env.open_db(name, create=False)
            with env.begin(db=db) as txn:
                st = txn.stat(db)
            pages = st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]
            out[name.decode()] = pages * st["psize"]
        return out
    finally:
        env.close()


def search_tables(path: Path) -> dict[str, float]:
    """Bytes of pages each table of the search index holds (its tables of 4 KB or less
    together as ``search:other``)."""
    import sqlite3

    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name").fetchall()
    except sqlite3.OperationalError:  # an SQLite built without dbstat
        return {}
    finally:
        conn.close()
    out = {f"search:{name}": float(size) for name, size in rows if size > 4096}
    out["search:other"] = float(sum(size for _, size in rows if size <= 4096))
    return out


def bench_cli_storage(root: Path, edits: int, *, compressed: bool = True) -> dict[str, float]:
    """One ``coder-es run`` with the scripted provider: read a 100 KB file, then ``edits`` edits
    of distinct lines (one per model step), in a new LMDB store. What a real session stores per
    edit (request manifests, tool results, file versions, the search index), not only the blobs
    the API-level ``bench_storage`` writes. ``compressed``: the store writes its events'
    states compressed (the default; else ``COMPRESSOR_TOPIC`` chooses JSON text,
    coder_es.store.compression)."""
    root = root / ("compressed" if compressed else "plain")
    root.mkdir()
    import json
    import os
    import subprocess

    rng = random.Random(11)
    words = ["def", "return", "self", "value", "index", "result", "items", "for", "in", "if"]
    words += ["None", "data", "path", "config", "node", "event", "session", "=", "(", ")", ":"]
    lines: list[str] = []
    while sum(len(x) for x in lines) < 100_000:
        body = " ".join(rng.choice(words) for _ in range(rng.randint(3, 12)))
        lines.append(f"x{len(lines):05d} {body}\n")
    ws = root / "cli-ws"
    ws.mkdir()
    (ws / "big.py").write_text("".join(lines))
    subprocess.run(["git", "init", "-q"], cwd=ws, check=True)
    picks = rng.sample(range(len(lines)), edits)
    turns: list[dict[str, Any]] = [
        {"blocks": [{"type": "tool_use", "name": "read", "input": {"path": "big.py"}}]}
    ]
    for i in picks:
        edit = {"path": "big.py", "old_string": f"x{i:05d} ", "new_string": f"x{i:05d} edited "}
        turns.append({"blocks": [{"type": "tool_use", "name": "edit", "input": edit}]})
    turns.append({"blocks": [{"type": "text", "text": "done"}]})
    script = root / "cli-edits.json"
    script.write_text(json.dumps({"turns": turns}))
    store = root / "cli-store"
    env = dict(os.environ)
    code = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (code, env.get("PYTHONPATH", "")) if p)
    env.pop("COMPRESSOR_TOPIC", None)
    if not compressed:
        env["COMPRESSOR_TOPIC"] = "coder_es.store.compression:EventReader"
    argv = [sys.executable, "-c", "from coder_es.cli.main import run; run()", "run", "edit"]
    argv += ["--script", str(script), "--allow", "read", "--allow", "edit"]
    argv += ["--max-steps", str(edits + 5), "--store", str(store), "--backend", "lmdb"]
    t0 = time.perf_counter()
    subprocess.run(argv, cwd=ws, env=env, check=True, capture_output=True)
    run_s = time.perf_counter() - t0
    dbs = lmdb_db_bytes(store)
    search = sum(p.stat().st_size for p in store.glob("search*") if p.is_file())
    blobs = sum(v for k, v in dbs.items() if k.startswith("coder_es.blobs"))
    events = sum(v for k, v in dbs.items() if k.endswith(":events"))
    app = open_app("lmdb", store)
    try:
        digests = list(app.blobs._digests())
        times, cpu = [], []
        content = 0
        for digest in digests:
            t, c = time.perf_counter(), time.thread_time()
            content += len(app.blobs.get(digest))
            times.append((time.perf_counter() - t) * 1000)
            cpu.append((time.thread_time() - c) * 1000)
        # The baseline, from the same session: its events as plain JSON and every blob whole.
        plain = app.mapper.compressor.decompress if app.mapper.compressor else bytes
        states = app.recorder.select_notifications(start=1, limit=10_000_000)
        state_bytes = sum(len(plain(n.state)) for n in states)
    finally:
        app.close()
    parts = {name: float(size) for name, size in dbs.items() if size > 4096}
    parts.update(search_tables(store / "search.sqlite"))
    return {
        **{f"part:{name}": size for name, size in parts.items()},
        "lmdb_bytes": sum(dbs.values()),
        "blob_bytes": blobs,
        "blob_entries": len(digests),
        "event_bytes": events,
        "search_bytes": search,
        "total_bytes": sum(dbs.values()) + search,
        "plain_bytes": state_bytes + content,
        "state_bytes": state_bytes,
        "content_bytes": content,
        "read_median_ms": statistics.median(times),
        "read_max_ms": max(times),
        # On a loaded machine the wall-clock maximum is a preemption; CPU time is the read's.
        "read_max_cpu_ms": max(cpu),
        "run_s": run_s,
    }


def print_cli_storage(edits: int, st: dict[str, float], how: str = "") -> None:
    print(f"\ncoder-es run (scripted): read a 100 KB file, then {edits} one-line edits{how}")
    print(
        f"  store holds {st['total_bytes'] / 1e6:.2f} MB (target < 2 MB): LMDB "
        f"{st['lmdb_bytes'] / 1e6:.2f} MB (blobs {st['blob_bytes'] / 1e6:.2f} MB in "
        f"{st['blob_entries']:.0f} entries, events {st['event_bytes'] / 1e6:.2f} MB) + search "
        f"index {st['search_bytes'] / 1e6:.2f} MB; run {st['run_s']:.1f} s"
    )
    print(
        f"  baseline, the same session unencoded: events as JSON {st['state_bytes'] / 1e6:.2f} MB"
        f" + every blob whole {st['content_bytes'] / 1e6:.2f} MB = {st['plain_bytes'] / 1e6:.2f} "
        f"MB; stored LMDB / baseline: {st['lmdb_bytes'] / st['plain_bytes']:.4f}"
    )
    parts = ", ".join(
        f"{k[5:]} {v / 1e3:.0f} KB"
        for k, v in sorted(st.items(), key=lambda kv: -kv[1])
        if k.startswith("part:")
    )
    print(f"  by table: {parts}")
    print(
        f"  read every blob back: median {st['read_median_ms']:.2f} ms, "
        f"max {st['read_max_ms']:.2f} ms wall, {st['read_max_cpu_ms']:.2f} ms CPU (target < 10 ms)"
    )


def cli_storage_both(root: Path, edits: int) -> None:
    plain = bench_cli_storage(root, edits, compressed=False)
    print_cli_storage(edits, plain, " (COMPRESSOR_TOPIC: events stored as JSON, as before)")
    packed = bench_cli_storage(root, edits)
    print_cli_storage(edits, packed, " (events stored compressed: the default)")
    print(
        f"  compressed / JSON: store {packed['total_bytes'] / plain['total_bytes']:.3f}, "
        f"events {packed['event_bytes'] / plain['event_bytes']:.3f}"
    )


def store_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=["sqlite", "lmdb"], default=None)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument(
        "--cli-edits",
        type=int,
        metavar="N",
        help="only the coder-es run storage scenario, with N edits (the full run uses 500)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="coder-es-bench-") as tmp:
        root = Path(tmp)
        if args.cli_edits:
            cli_storage_both(root, args.cli_edits)
            return
        backend = pick_backend(args.backend, root)
        big = 10_000 if args.quick else 100_000
        reps = 7 if args.quick else 21
        print(f"backend: {backend}  (python {sys.version.split()[0]})")

        fl = bench_fork_label(backend, root, [10, 10_000, big], reps)
        base_fork, base_label = fl[10]
        print("\nfork / label (median ms) by events in the session; ratio vs 10 events")
        for size, (fork, label) in fl.items():
            print(
                f"  {size:>7} events: fork {fork:7.2f} ms (x{fork / base_fork:.2f})   "
                f"label {label:6.2f} ms (x{label / base_label:.2f})"
            )

        opened, replay = bench_open(backend, root, big, 7 if args.quick else 9)
        print(
            f"\nopen a {big}-event session (aggregate + tree ready): {opened:.1f} ms; "
            f"full replay {replay:.1f} ms; ratio {opened / replay:.3f} (target < 300 ms)"
        )

        small, large, deep = bench_switches(
            backend, root, [(100, 10), (10_000, 10), (10_000, 10_000)], reps
        )
        print("\nswitch between branches differing in 10 files (median ms)")
        print(f"  100-file workspace, short history:  {small:7.2f} ms (baseline)")
        print(
            f"  10k-file workspace, short history:  {large:7.2f} ms (x{large / small:.2f}) "
            "(target < 100 ms)"
        )
        print(f"  10k-file workspace, 10k events:     {deep:7.2f} ms (x{deep / small:.2f})")

        st = bench_storage(backend, root, 500, 50)
        print("\n500 turns each editing one line of a 100 KB file")
        grew, blobs = st["store_bytes_added"] / 1e6, st["blob_bytes"] / 1e6
        full = st["full_copy_bytes"] / 1e6
        print(
            f"  store grew {grew:.2f} MB (blobs {blobs:.2f} MB) vs {full:.1f} MB of full "
            "copies: ratio "
            f"{st['store_bytes_added'] / st['full_copy_bytes']:.4f} (target < 2 MB)"
        )
        print(
            f"  {st['bytes_per_turn']:.0f} bytes per turn; write {st['write_ms_per_turn']:.2f} "
            f"ms per turn"
        )
        print(
            f"  read any version back: median {st['read_median_ms']:.2f} ms, "
            f"max {st['read_max_ms']:.2f} ms (target < 10 ms)"
        )

        cli_storage_both(root, 100 if args.quick else 500)


if __name__ == "__main__":
    main()
