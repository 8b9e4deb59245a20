"""Benchmark: our three-way merge against ``git merge-file``, and stat-index change detection.

    python3 bench/merge.py [--corpus PATH] [--files N] [--repeat R]

1. Merge: every merge of the corpus (real histories; see shared/merge-corpus/README.md) through
   ``three_way_merge`` and through ``git merge-file -p`` in the same run. Prints the agreement
   (same clean/conflict status; byte-identical output where both are clean), the median time per
   file merge of each, and the ratio.
2. Change detection: a workspace of N files (10,000 by default). Times a rescan that finds 10,
   100 and 1,000 changed files, against the baseline of hashing every file (what a scan without a
   stat index costs) measured in the same run.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from coder_es.store.blobs import MemoryBlobStore
from coder_es.workspace.merge import three_way_merge
from coder_es.workspace.stat_index import StatIndex

DEFAULT_CORPUS = (
    Path(__file__).resolve().parents[1].parent
    / "shared"
    / "merge-corpus"
    / "aider-history.jsonl.gz"
)


def bench_merge(corpus: Path, repeat: int) -> None:
    with gzip.open(corpus, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    tmp = Path(tempfile.mkdtemp(prefix="merge-bench-"))
    ours_t: list[float] = []
    git_t: list[float] = []
    same_status = both_clean = identical = 0
    vs_recorded = 0
    try:
        for row in rows:
            base, ours, theirs = row["base"], row["ours"], row["theirs"]
            best = float("inf")
            for _ in range(repeat):
                t0 = time.perf_counter()
                result = three_way_merge(
                    base, theirs, ours, ours_label="ours", theirs_label="theirs"
                )
                best = min(best, time.perf_counter() - t0)
            ours_t.append(best)
            # git merge-file on the same inputs: write them and spawn it, as a caller would.
            t0 = time.perf_counter()
            for name, text in (("base", base), ("ours", ours), ("theirs", theirs)):
                (tmp / name).write_text(text, encoding="utf-8")
            proc = subprocess.run(
                [
                    "git",
                    "merge-file",
                    "-p",
                    "-L",
                    "ours",
                    "-L",
                    "base",
                    "-L",
                    "theirs",
                    str(tmp / "ours"),
                    str(tmp / "base"),
                    str(tmp / "theirs"),
                ],
                capture_output=True,
                check=False,
            )
            git_t.append(time.perf_counter() - t0)
            git_clean = proc.returncode == 0
            vs_recorded += git_clean == row["git_clean"]
            same_status += result.clean == git_clean
            if result.clean and git_clean:
                both_clean += 1
                identical += result.text.encode("utf-8") == proc.stdout
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    n = len(rows)
    lines = [row["base"].count("\n") for row in rows]
    big = [t for t, k in zip(ours_t, lines, strict=True) if k >= 500]
    med_ours = statistics.median(ours_t) * 1e3
    med_git = statistics.median(git_t) * 1e3
    print(f"merge corpus: {corpus.name}, {n} file merges (largest base: {max(lines)} lines)")
    print(f"  git merge-file here agrees with the recorded git result: {vs_recorded}/{n}")
    print(f"  same clean/conflict status: {same_status}/{n} = {100 * same_status / n:.2f}%")
    print(
        f"  byte-identical where both clean: {identical}/{both_clean} = "
        f"{100 * identical / max(both_clean, 1):.2f}%"
    )
    print(
        f"  time per file merge, median: ours {med_ours:.3f} ms, git merge-file {med_git:.3f} ms,"
        f" ratio ours/git {med_ours / med_git:.3f}"
    )
    print(
        f"  ours p95 {statistics.quantiles(ours_t, n=20)[-1] * 1e3:.3f} ms, max "
        f"{max(ours_t) * 1e3:.3f} ms; files >= 500 lines ({len(big)}): median "
        f"{statistics.median(big) * 1e3:.3f} ms"
    )


def make_workspace(root: Path, n_files: int) -> list[Path]:
    per_dir = 100
    paths = []
    for i in range(n_files):
        d = root / f"pkg{i // per_dir:03d}"
        if i % per_dir == 0:
            d.mkdir()
        p = d / f"mod{i % per_dir:03d}.py"
        p.write_text(f"# module {i}\n" + "def f(x):\n    return x + 1\n" * 20)
        paths.append(p)
    # An existing checkout: nothing was modified in the last moments (see racy entries).
    old = time.time_ns() - 3600 * 10**9
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*filenames, *dirnames]:
            os.utime(os.path.join(dirpath, name), ns=(old, old))
    return paths


def bench_changes(n_files: int, repeat: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="stat-bench-"))
    try:
        paths = make_workspace(root, n_files)
        t0 = time.perf_counter()
        index = StatIndex(root, MemoryBlobStore())
        build = time.perf_counter() - t0
        print(f"change detection: {n_files} files in {n_files // 100} directories")
        print(f"  index build (hash + snapshot every file): {build * 1e3:.1f} ms")
        baseline = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            _hash_everything(root)
            baseline.append(time.perf_counter() - t0)
        base_med = statistics.median(baseline)
        print(f"  baseline, hashing every file: median {base_med * 1e3:.1f} ms")
        rng = random.Random(1)
        gen = 0
        for k in (0, 10, 100, 1000):
            times = []
            hashed = []
            for _ in range(repeat):
                gen += 1
                time.sleep(0.1)  # rounds stand for shell commands, which are not 30 ms apart
                for p in rng.sample(paths, k):
                    p.write_text(f"# changed {gen}\n")
                t0 = time.perf_counter()
                changes = index.rescan()
                times.append(time.perf_counter() - t0)
                hashed.append(index.hashed)
                assert len(changes) == k, (len(changes), k)
            med = statistics.median(times)
            # Files changed by the previous round are still "racy" (mtime within 50 ms of the
            # scan that recorded them) and are re-checked by content once: in the hashed count.
            print(
                f"  rescan finding {k:>4} changed files: median {med * 1e3:.1f} ms, min "
                f"{min(times) * 1e3:.1f} ms (ratio to baseline {med / base_med:.3f}; files read "
                f"and hashed: median {statistics.median(hashed):.0f})"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _hash_everything(root: Path) -> None:
    import hashlib

    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            with open(os.path.join(dirpath, name), "rb") as f:
                hashlib.sha256(f.read()).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    if args.corpus.exists():
        bench_merge(args.corpus, repeat=3)
    else:
        print(f"merge corpus not found at {args.corpus}: skipping the merge benchmark")
    bench_changes(args.files, args.repeat)


if __name__ == "__main__":
    main()
