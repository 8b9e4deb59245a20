"""A bash step run through an editor's terminal (ACP ``terminal/*``) against the same step run
locally: what the terminal path adds (the ``/bin/sh`` wrapper, ``setsid``, the report FIFO).

The terminal here is ``SubprocessTerminal``, an in-process ``tools.terminal.Terminal`` that runs
the command line as a subprocess, as an editor would; the JSON-RPC round trips of a real client
(five requests per command over stdio) are not included. Each figure is the median of ``--runs``
steps of ``true`` (wall time and the CPU time of this process and its children); the ratio is
against the local step measured in the same run, in the same mode. Both ways bash runs are
measured: the namespace sandbox and the stat-index fallback (``CODER_ES_SANDBOX=off``).

Run:  python3 bench/terminal.py [--runs 30] [--files 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from coder_es.sandbox import SandboxSettings, availability
from coder_es.store.blobs import MemoryBlobStore
from coder_es.tools.base import ToolContext
from coder_es.tools.bash import BashInput, BashTool
from coder_es.tools.terminal import TerminalRun
from coder_es.workspace.workspace import Workspace


class NullSink:
    def observe_file(self, **_: Any) -> None:
        pass

    def apply_edit(self, **_: Any) -> None:
        pass


class SubprocessTerminal:
    """Runs the command line as a child process, one stream of output, like an editor."""

    async def run(
        self,
        command: str,
        args: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        timeout_ms: int,
        output_limit: int,
    ) -> TerminalRun:
        proc = await asyncio.create_subprocess_exec(
            command,
            *args,
            cwd=str(cwd),
            env={**os.environ, **env},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await proc.communicate()
        return TerminalRun("t", out[-output_limit:].decode(), False, proc.returncode, None, False)


def cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def measure(root: Path, mode: str, terminal: bool, runs: int) -> tuple[float, float]:
    """Median (wall, cpu) seconds of one ``true`` step."""
    ws = Workspace(root, MemoryBlobStore(), NullSink())
    settings = SandboxSettings(mode="off" if mode == "fallback" else "auto")
    cache: dict[str, Any] = {}
    tool = BashTool()
    walls, cpus = [], []
    for i in range(runs + 1):
        ctx = ToolContext(
            root=root,
            tool_use_id=f"b{i}",
            sink=NullSink(),
            workspace=ws,
            cache=cache,
            sandbox=settings,
            terminal=SubprocessTerminal() if terminal else None,
        )
        t0, c0 = time.perf_counter(), cpu_s()
        result = asyncio.run(tool.run(BashInput("true"), ctx))
        wall, cpu = time.perf_counter() - t0, cpu_s() - c0
        assert not result.is_error, result.output
        if i:  # the first step builds the stat index (fallback): not a steady-state figure
            walls.append(wall)
            cpus.append(cpu)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--files", type=int, default=1000)
    a = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ws"
        for i in range(a.files):
            d = root / f"d{i // 100:03d}"
            d.mkdir(parents=True, exist_ok=True)
            (d / f"f{i % 100:02d}.txt").write_text(f"{i}\n")
        modes = ["fallback"]
        if availability(SandboxSettings(), root).active:
            modes.insert(0, "sandbox")
        print(f"bash 'true', {a.files} files, median of {a.runs} steps (wall / CPU incl. children)")
        for mode in modes:
            local = measure(root, mode, False, a.runs)
            term = measure(root, mode, True, a.runs)
            print(
                f"  {mode:8}  local {local[0] * 1000:7.1f} / {local[1] * 1000:6.1f} ms   "
                f"terminal {term[0] * 1000:7.1f} / {term[1] * 1000:6.1f} ms   "
                f"ratio {term[0] / local[0]:.2f}x wall, {term[1] / local[1]:.2f}x CPU"
            )


if __name__ == "__main__":
    main()
