"""``coder-es forget`` on a large store: what crypto-shredding that cannot be undone costs.

    python3 bench/forget.py                      10k sessions, lmdb and sqlite
    python3 bench/forget.py --sessions 1000 --backend lmdb --runs 3

A store of N sessions is built (each: a start, a user message quoting a secret, so each has a
data key and a sealed value), then one session is forgotten, ``--runs`` times (a different one
each time). Printed per backend, medians over the runs:

- ``rotate``: deleting the session's sealed records and re-wrapping every other session's data
  key under a new wrapping key, in one transaction (``SecretVault.forget_sessions``);
- ``scrub``: removing the deleted records' bytes from the files (``coder_es.store.scrub``: LMDB
  compacting copy + swap; SQLite secure_delete + VACUUM + WAL truncation);
- ``forget``: both (what the command costs, start-up aside);
- the baseline, measured in the same run on the same store: copying the store's files
  (``shutil.copyfile``, what any whole-store rewrite costs at least), and the ratio to it;
- the store's size before the first forget and after the last, and the space given back.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from coder_es.application import CoderApp  # noqa: E402
from coder_es.store.config import StoreConfig  # noqa: E402
from coder_es.store.scrub import scrub_store  # noqa: E402

SECRET = "sk-proj-" + "Xq7vB2nL9pR4tY6wZ1cD3fG5hJ8k{:06d}"


def store_files(config: StoreConfig) -> list[Path]:
    if config.backend == "lmdb":
        return [config.lmdb_dir / "data.mdb"]
    base = config.sqlite_file
    return [p for p in (base, base.with_name(base.name + "-wal")) if p.exists()]


def size(config: StoreConfig) -> int:
    return sum(p.stat().st_size for p in store_files(config))


def build(config: StoreConfig, sessions: int) -> list[str]:
    app = CoderApp(config)
    ids = []
    try:
        for i in range(sessions):
            session = app.start_session(workspace="/bench")
            session.add_user_message(f"deploy with {SECRET.format(i)}")
            app.save(session)
            ids.append(str(session.id))
    finally:
        app.close()
    return ids


def copy_baseline(config: StoreConfig) -> float:
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        for path in store_files(config):
            target = Path(out) / path.name
            shutil.copyfile(path, target)
            fd = os.open(target, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        return time.perf_counter() - start


def run(backend: str, sessions: int, runs: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        config = StoreConfig(backend, Path(tmp) / ".coder-es", durable=False)
        t0 = time.perf_counter()
        ids = build(config, sessions)
        built = time.perf_counter() - t0
        before = size(config)
        rotate, scrub, copies, given = [], [], [], []
        for victim in ids[:runs]:
            at_start = size(config)
            app = CoderApp(config)
            try:
                start = time.perf_counter()
                assert app.sealing.vault.forget_sessions([app.resolve_session(victim)])
                rotate.append(time.perf_counter() - start)
            finally:
                app.close()
            start = time.perf_counter()
            scrub_store(config)
            scrub.append(time.perf_counter() - start)
            given.append(at_start - size(config))
            copies.append(copy_baseline(config))
        after = size(config)
    r, s, c = (statistics.median(x) for x in (rotate, scrub, copies))
    print(f"{backend}: {sessions} sessions (built in {built:.1f} s), {runs} forget runs")
    print(f"  rotate  {r:8.3f} s")
    print(f"  scrub   {s:8.3f} s")
    print(f"  forget  {r + s:8.3f} s   = {(r + s) / c:.1f}x copying the store's files")
    print(f"  baseline: copying the files {c:8.3f} s")
    print(
        f"  size: {before / 1e6:.2f} MB before, {after / 1e6:.2f} MB after, "
        f"{(before - after) / 1e6:.2f} MB given back ({(before - after) / before:.0%})"
    )
    # The first scrub also gives back what the build left free; the later ones, one session's.
    later = f", then {statistics.median(given[1:]) / 1e3:.1f} kB (median)" if runs > 1 else ""
    print(f"  given back per forget: first {given[0] / 1e3:.1f} kB{later}")
    return {"forget_s": r + s, "given_back": before - after}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--backend", choices=["lmdb", "sqlite"], action="append")
    args = parser.parse_args()
    for backend in args.backend or ["lmdb", "sqlite"]:
        run(backend, args.sessions, args.runs)


if __name__ == "__main__":
    main()
