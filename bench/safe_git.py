"""The cost of coder-es's git calls with every hook point off, against plain git, same run.

    python3 bench/safe_git.py [--files 2000] [--reps 15]

A git repository of ``--files`` files with a few changes staged and unstaged. Alternating, the
median over ``--reps`` of:

- a session start's git work done plainly: ``git status`` and the recorded repository state's
  calls (rev-parse x3, symbolic-ref, diff --cached, diff, diff --name-only), each a plain
  ``git`` process (what coder-es ran before issue 28);
- the same through ``SafeGit``: one ``git config --list`` for the drivers, then the same calls
  with the settings that switch every hook point off.

Prints both medians and their ratio (target: <= 1.25; the listing is one more git process).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from coder_es.workspace.safe_git import SafeGit

CALLS: tuple[tuple[str, ...], ...] = (
    ("status", "--porcelain=v1", "--branch", "--ignore-submodules=all"),
    ("rev-parse", "--show-toplevel"),
    ("rev-parse", "--verify", "-q", "HEAD"),
    ("rev-parse", "--show-prefix"),
    ("symbolic-ref", "-q", "--short", "HEAD"),
    ("diff", "--cached", "--binary", "--no-color", "--no-ext-diff", "--no-renames"),
    ("diff", "--binary", "--no-color", "--no-ext-diff", "--no-renames"),
    ("diff", "--name-only", "-z", "--no-renames", "--diff-filter=D", "HEAD"),
)


def _repo(root: Path, files: int) -> None:
    for i in range(files):
        path = root / f"d{i % 40}" / f"f{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"x = {i}\n" * 20)
    git = ["git", "-c", "user.email=b@b", "-c", "user.name=b"]
    subprocess.run([*git, "init", "-q"], cwd=root, check=True)
    subprocess.run([*git, "add", "-A"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-qm", "init"], cwd=root, check=True)
    for i in range(0, files, max(1, files // 20)):
        (root / f"d{i % 40}" / f"f{i}.py").write_text("changed\n")
    subprocess.run([*git, "add", "d0"], cwd=root, check=True)


def plain(root: Path) -> None:
    for args in CALLS:
        subprocess.run(["git", *args], cwd=root, capture_output=True, check=False)


def safe(root: Path) -> None:
    git = SafeGit.at(root)
    for args in CALLS:
        git.run(*args)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-safe-git-") as tmp:
        root = Path(tmp)
        _repo(root, args.files)
        plain(root)  # warm the index and the page cache for both
        times: dict[str, list[float]] = {"plain": [], "safe": []}
        for _ in range(args.reps):
            for name, run in (("plain", plain), ("safe", safe)):
                started = time.perf_counter()
                run(root)
                times[name].append(time.perf_counter() - started)
    p, s = statistics.median(times["plain"]), statistics.median(times["safe"])
    print(f"session start git work, {args.files} files, median of {args.reps}:")
    print(f"  plain git    {p * 1000:8.1f} ms")
    print(f"  SafeGit      {s * 1000:8.1f} ms")
    print(f"  ratio        {s / p:8.2f}x  (target <= 1.25)")


if __name__ == "__main__":
    main()
