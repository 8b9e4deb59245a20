"""Rewind and checkout of many files against git doing the same restoration.

    python3 bench/rewind.py [--backend lmdb|sqlite] [--files 3000] [--tree 10000] [--quick]

A git repository of ``--tree`` files; a session whose shell command rewrote ``--files`` of them.
Measured in turns on the same tree, medians over repetitions:

- ``rewind`` to before the command (every changed file restored: the disk still holds what the
  session knew, so no merge is needed) against ``git checkout -- <those files>`` bringing the
  same files back from git's index. Target: ratio <= 1.5 (issue 30).
- ``checkout`` back to the command's node (the same files, the other way).
- the same rewind when the user has edited 1 in 10 of the files since (those are merged).
- a rewind of 10 files in a 100,000-file workspace against the same in a 1,000-file one: the cost
  follows the files that differ between the nodes, not the size of the tree. Target: ratio ~ 1.
- ``coder-es rewind`` as a whole command (a process, as a user runs it: start-up, store opening
  and all) restoring ``--files`` files in a ``--whole-tree``-file repository, against ``git
  checkout -- <those files>`` as a process. Target: ratio <= 2 (issue 35). Run with the
  100,000-file part (without ``--no-scale``), or alone with ``--whole``.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import subprocess
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
from coder_es.domain.session import NodeId
from coder_es.store.config import StoreConfig


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def name_of(i: int) -> str:
    # A few levels of directories, as a real source tree has.
    return f"pkg{i % 20:02}/mod{(i // 20) % 25:02}/file{i:06}.py"


def old_content(i: int) -> bytes:
    return b"".join(b"line %d of file %d\n" % (n, i) for n in range(40))


def new_content(i: int) -> bytes:
    return old_content(i).replace(b"line 7 of", b"LINE 7 (rewritten) of")


def git(ws: Path, *args: str, stdin: bytes | None = None) -> None:
    subprocess.run(
        ["git", "-c", "core.fsync=none", *args],
        cwd=ws,
        input=stdin,
        check=True,
        capture_output=True,
    )


def make_tree(ws: Path, files: int, *, with_git: bool = True) -> None:
    for i in range(files):
        p = ws / name_of(i)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(old_content(i))
    if not with_git:
        return
    git(ws, "init", "-q")
    (ws / ".gitignore").write_text(".coder-es/\n")
    git(ws, "add", "-A")
    git(ws, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "tree")


class Scenario:
    """A workspace, its git repository, and a session whose shell command rewrote ``changed``."""

    def __init__(
        self, root: Path, backend: str, tree: int, changed: int, *, with_git: bool = True
    ) -> None:
        self.ws = root / f"ws-{tree}-{changed}"
        self.ws.mkdir()
        make_tree(self.ws, tree, with_git=with_git)
        self.app = CoderApp(StoreConfig(backend=backend, path=self.ws / ".coder-es"))
        # Spread across the tree, as a rename or a formatter run touches files everywhere.
        step = max(1, tree // changed)
        self.indices = [i * step for i in range(changed)]
        self.paths = [name_of(i) for i in self.indices]
        session = self.app.start_session(workspace=str(self.ws))
        session.add_user_message("rewrite the files")
        self.before: NodeId | None = session.head
        files_changed = []
        # What the shell tool's capture stores: the content before and after.
        self.app.blobs.put_many(
            [(old_content(i), None) for i in self.indices]
            + [(new_content(i), sha(old_content(i))) for i in self.indices]
        )
        for i, path in zip(self.indices, self.paths, strict=True):
            (self.ws / path).write_bytes(new_content(i))
            files_changed.append(
                {"path": path, "before": sha(old_content(i)), "after": sha(new_content(i))}
            )
        self.after = session.complete_tool_call(
            tool_use_id="t1", name="bash", output="", files_changed=files_changed
        )
        self.app.save(session)
        self.sid: UUID = session.id
        self.branching = Branching(self.app, self.ws)
        self.branching.views(self.sid)
        self.branching.checkpoint()

    def rewind(self) -> float:
        t0 = time.perf_counter()
        result = self.branching.rewind(self.sid, self.before or "")
        elapsed = time.perf_counter() - t0
        assert len(result.files) == len(self.paths), len(result.files)
        assert not result.conflicts, result.conflicts[:3]
        return elapsed

    def forward(self) -> float:
        t0 = time.perf_counter()
        result = self.branching.checkout(self.sid, self.after)
        elapsed = time.perf_counter() - t0
        assert len(result.files) == len(self.paths) and not result.conflicts
        return elapsed

    def git_restore(self) -> float:
        """``git checkout -- <files>``: the disk holds the new content, git's index the old."""
        return self._git("checkout", "--pathspec-from-file=-", "--")

    def git_checkout_index(self) -> float:
        """``git checkout-index -f --stdin``: git's plumbing for the same, no pathspec matching."""
        return self._git("checkout-index", "-f", "--stdin")

    def _git(self, *command: str) -> float:
        listing = "".join(p + "\n" for p in self.paths).encode()
        t0 = time.perf_counter()
        git(self.ws, *command, stdin=listing)
        elapsed = time.perf_counter() - t0
        assert (self.ws / self.paths[-1]).read_bytes() == old_content(self.indices[-1])
        # Back to what the session knows (untimed): the command's result.
        for i, path in zip(self.indices, self.paths, strict=True):
            (self.ws / path).write_bytes(new_content(i))
        return elapsed

    def user_edits(self, every: int) -> None:
        """The user appends a line to every ``every``-th file (after the command's change)."""
        for n, (i, path) in enumerate(zip(self.indices, self.paths, strict=True)):
            if n % every == 0:
                (self.ws / path).write_bytes(new_content(i) + b"# the user's line\n")

    def close(self) -> None:
        self.app.close()


def median(times: list[float]) -> float:
    return statistics.median(times) * 1000


def round_robin(reps: int, steps: dict[str, Callable[[], float]]) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in steps}
    for rep in range(reps + 1):
        for name, step in steps.items():
            t = step()
            if rep:  # the first round warms caches
                times[name].append(t)
    return {name: median(ts) for name, ts in times.items()}


def bench_many(root: Path, backend: str, tree: int, files: int, reps: int) -> dict[str, Any]:
    sc = Scenario(root, backend, tree, files)
    try:
        rounds = round_robin(
            reps,
            {
                "git": sc.git_restore,
                "git_index": sc.git_checkout_index,
                "rewind": sc.rewind,
                "checkout": sc.forward,
            },
        )
        merged = []
        for _ in range(max(1, reps // 3)):
            sc.user_edits(10)
            merged.append(sc.rewind())
            sc.forward()
        rounds["rewind_user_edits"] = median(merged)
        return rounds
    finally:
        sc.close()


def bench_whole(root: Path, backend: str, tree: int, files: int, reps: int) -> dict[str, float]:
    """``coder-es rewind`` and ``git checkout`` as whole processes, in turns."""
    import os

    sc = Scenario(root, backend, tree, files)
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)
    # As installed: the modules' bytecode is cached (the first, untimed round writes it),
    # not compiled again by every process (``PYTHONDONTWRITEBYTECODE`` in the environment).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(root / "pycache")
    env["CODER_ES_BACKEND"] = backend
    rewind = [
        sys.executable,
        "-m",
        "coder_es.cli.main",
        "rewind",
        str(sc.sid),
        sc.before or "",
        "--json",
    ]

    def command() -> float:
        t0 = time.perf_counter()
        subprocess.run(rewind, cwd=sc.ws, env=env, check=True, capture_output=True)
        elapsed = time.perf_counter() - t0
        assert (sc.ws / sc.paths[-1]).read_bytes() == old_content(sc.indices[-1])
        sc.forward()  # back to the command's result (untimed)
        return elapsed

    try:
        return round_robin(reps, {"git": sc.git_restore, "coder-es rewind": command})
    finally:
        sc.close()


def bench_scale(root: Path, backend: str, sizes: list[int], reps: int) -> dict[int, float]:
    scenarios = {size: Scenario(root, backend, size, 10, with_git=False) for size in sizes}
    try:
        times: dict[int, list[float]] = {size: [] for size in sizes}
        for rep in range(reps + 1):
            for size, sc in scenarios.items():
                t = sc.rewind() + sc.forward()
                if rep:
                    times[size].append(t / 2)
        return {size: median(ts) for size, ts in times.items()}
    finally:
        for sc in scenarios.values():
            sc.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=["lmdb", "sqlite"], default="lmdb")
    parser.add_argument("--files", type=int, default=3000)
    parser.add_argument("--tree", type=int, default=10_000)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument("--no-scale", action="store_true", help="skip the 100,000-file tree")
    parser.add_argument(
        "--whole",
        action="store_true",
        help="time `coder-es rewind` as a whole process even with --no-scale",
    )
    parser.add_argument("--whole-tree", type=int, default=100_000)
    args = parser.parse_args()
    big = 10_000 if args.quick else 100_000
    with tempfile.TemporaryDirectory(prefix="coder-es-bench-rewind-") as tmp:
        root = Path(tmp)
        print(f"backend: {args.backend} (durable)  python {sys.version.split()[0]}")
        r = bench_many(root, args.backend, args.tree, args.files, args.reps)
        print(f"\nrestore {args.files} changed files in a {args.tree}-file git tree (median ms)")
        print(f"  git checkout -- <files>:           {r['git']:8.1f} ms (baseline)")
        print(
            f"  git checkout-index -f --stdin:     {r['git_index']:8.1f} ms "
            f"(x{r['git_index'] / r['git']:.2f})"
        )
        print(
            f"  rewind (disk as the session knew): {r['rewind']:8.1f} ms "
            f"(x{r['rewind'] / r['git']:.2f}, target <= 1.5; "
            f"x{r['rewind'] / r['git_index']:.2f} of checkout-index)"
        )
        print(
            f"  checkout back to the command:      {r['checkout']:8.1f} ms "
            f"(x{r['checkout'] / r['git']:.2f})"
        )
        print(
            f"  rewind, user edited 1 in 10:       {r['rewind_user_edits']:8.1f} ms "
            f"(x{r['rewind_user_edits'] / r['git']:.2f})"
        )
        if args.whole or not args.no_scale:
            w = bench_whole(root, args.backend, args.whole_tree, args.files, args.reps)
            print(
                f"\nwhole commands: restore {args.files} files in a {args.whole_tree}-file "
                "git repository (median ms, processes)"
            )
            print(f"  git checkout -- <files>:  {w['git']:8.1f} ms (baseline)")
            print(
                f"  coder-es rewind S NODE:   {w['coder-es rewind']:8.1f} ms "
                f"(x{w['coder-es rewind'] / w['git']:.2f}, target <= 2)"
            )
        if not args.no_scale:
            small = 1000
            s = bench_scale(root, args.backend, [small, big], args.reps)
            print("\nrewind of 10 files by workspace size (median ms)")
            print(f"  {small:>7}-file tree: {s[small]:7.2f} ms (baseline)")
            print(f"  {big:>7}-file tree: {s[big]:7.2f} ms (x{s[big] / s[small]:.2f}, target ~1)")


if __name__ == "__main__":
    main()
