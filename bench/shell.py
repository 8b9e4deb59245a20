"""Shell-step benchmark: the overhead of a bash step in a 100,000-file git workspace.

Targets (issue 15): the first command of a new session costs <= 2x ``git status`` on the same
tree, later commands <= 1x ``git status``; a command that changes 10 files among 100,000 costs
< 50 ms of overhead; the sandbox path does not read unchanged files.

A step's overhead is the bash tool's time minus the command's own time (the same command run
directly with ``bash -c``, measured in the same run). Each figure is a median; ratios are against
``git status`` on the same tree, measured in the same run. Both ways bash runs are measured: the
namespace sandbox (an overlay; its changes are the upper directory) and the stat-index fallback
(``CODER_ES_SANDBOX=off``: a scan of the whole tree before and after). "read" is the bytes the
process read during the step (``/proc/self/io`` rchar): the fallback's first step reads every
file; the sandbox reads only what the command changed.

Run:  python3 bench/shell.py [--files 100000] [--runs 5] [--skip-fallback] [--dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from coder_es.sandbox import SandboxSettings, availability
from coder_es.store.blobs import MemoryBlobStore
from coder_es.tools.base import ToolContext
from coder_es.tools.bash import BashInput, BashTool
from coder_es.workspace.workspace import Workspace

PER_DIR = 100


class NullSink:
    def observe_file(self, **_: Any) -> None:
        pass

    def apply_edit(self, **_: Any) -> None:
        pass


def build_repo(root: Path, files: int) -> None:
    """``files`` small files in directories of ``PER_DIR``, committed to git."""
    root.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        d = root / f"pkg{i // PER_DIR:04d}"
        if i % PER_DIR == 0:
            d.mkdir(exist_ok=True)
        (d / f"mod{i % PER_DIR:03d}.py").write_text(f"VALUE_{i} = {i}\n")
    git = ["git", "-c", "user.email=b@b", "-c", "user.name=b"]
    subprocess.run([*git, "init", "-q"], cwd=root, check=True)
    subprocess.run([*git, "add", "-A"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-qm", "tree"], cwd=root, check=True)
    # Entries written in the same second as the index are "racily clean": git re-reads them on
    # every status until the index is refreshed after that second.
    time.sleep(1.5)
    subprocess.run(["git", "update-index", "-q", "--refresh"], cwd=root, check=False)


def median_s(fn: Callable[[], Any], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def read_bytes() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


class Session:
    """One bash tool context: a new one is a new session (the fallback builds its index)."""

    def __init__(self, root: Path, mode: str) -> None:
        ws = Workspace(root, MemoryBlobStore(), NullSink())
        settings = SandboxSettings(mode="off" if mode == "fallback" else "auto")
        self.ctx = ToolContext(ws.root, "b", NullSink(), ws, sandbox=settings)
        self.tool = BashTool()

    def step(self, command: str) -> tuple[float, int, Any]:
        before = read_bytes()
        started = time.perf_counter()
        result = asyncio.run(self.tool.run(BashInput(command), self.ctx))
        elapsed = time.perf_counter() - started
        assert not result.is_error, result.output
        return elapsed, read_bytes() - before, result


def measure(root: Path, mode: str, runs: int, own_true: float, own_ten: float) -> dict[str, Any]:
    first_times, first_read = [], []
    for _ in range(max(1, runs // 2)):
        t, r, _ = Session(root, mode).step("true")
        first_times.append(t)
        first_read.append(r)
    session = Session(root, mode)
    session.step("true")
    later = [session.step("true") for _ in range(runs)]
    counter = iter(range(10**6))

    def ten() -> str:
        n = next(counter)
        return "; ".join(f"echo {n} >> pkg0001/mod{k:03d}.py" for k in range(10))

    tens = [session.step(ten()) for _ in range(runs)]
    assert all(len(r.files_changed) == 10 for _, _, r in tens)
    return {
        "first": statistics.median(first_times) - own_true,
        "first_read": statistics.median(first_read),
        "later": statistics.median(t for t, _, _ in later) - own_true,
        "later_read": statistics.median(r for _, r, _ in later),
        "ten": statistics.median(t for t, _, _ in tens) - own_ten,
        "ten_read": statistics.median(r for _, r, _ in tens),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--skip-fallback", action="store_true")
    parser.add_argument("--dir", type=Path, default=None, help="reuse/build the repository here")
    args = parser.parse_args()
    base = args.dir or Path(tempfile.mkdtemp(prefix="coder-es-bench-shell-"))
    root = base / f"repo{args.files}"
    if not (root / ".git").exists():
        started = time.perf_counter()
        build_repo(root, args.files)
        print(f"built {args.files} files in {time.perf_counter() - started:.0f} s ({root})")
    subprocess.run(["git", "update-index", "-q", "--refresh"], cwd=root, check=False)
    subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True)
    status = median_s(
        lambda: subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True),
        args.runs,
    )
    own_true = median_s(lambda: subprocess.run(["bash", "-c", "true"], cwd=root), args.runs)
    ten = "; ".join(f"echo 0 >> /tmp/coder-es-bench-{k}" for k in range(10))
    own_ten = median_s(lambda: subprocess.run(["bash", "-c", ten], cwd=root), args.runs)
    subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True)
    print(f"git status: {status * 1000:.0f} ms (median of {args.runs}); files: {args.files}")
    modes = ["sandbox"] + ([] if args.skip_fallback else ["fallback"])
    found = availability(SandboxSettings(), root)
    if not found.active:
        print(f"sandbox unavailable: {found.reason}")
        modes.remove("sandbox")
    for mode in modes:
        m = measure(root, mode, args.runs, own_true, own_ten)
        print(
            f"{mode:>8}: first command overhead {m['first'] * 1000:7.0f} ms "
            f"({m['first'] / status:5.2f}x git status, read {m['first_read'] / 1e6:.1f} MB); "
            f"later {m['later'] * 1000:6.0f} ms ({m['later'] / status:5.2f}x, "
            f"read {m['later_read'] / 1e6:.2f} MB); "
            f"10 files changed {m['ten'] * 1000:6.0f} ms ({m['ten'] / status:5.2f}x, "
            f"read {m['ten_read'] / 1e6:.2f} MB)"
        )
    subprocess.run(["git", "checkout", "-q", "--", "."], cwd=root, check=False)


if __name__ == "__main__":
    main()
