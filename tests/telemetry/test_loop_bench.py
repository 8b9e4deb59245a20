"""bench/loop.py's live-telemetry figures run end to end: timed, and counted in instructions."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOOP = str(ROOT / "bench" / "loop.py")


def test_timed_figures_with_export_on_and_off() -> None:
    arguments = ["--steps", "30", "--rounds", "1", "--telemetry", "--backend", "sqlite"]
    done = subprocess.run(
        [sys.executable, LOOP, *arguments],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "not exported" not in done.stderr  # every span reached the receiver
    for what in ("overhead per step with export", "(wall) with export", "(cpu) with export"):
        line = next(x for x in done.stdout.splitlines() if what in x)
        assert re.search(r"ratio \d+\.\d\d", line), line


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_instruction_counts_with_export_on_and_off() -> None:
    done = subprocess.run(
        [sys.executable, LOOP, "--instructions", "--backend", "sqlite"],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr
    found = re.search(r"with export ([\d.]+)M, without ([\d.]+)M; ratio ([\d.]+)", done.stdout)
    assert found is not None, done.stdout
    on, off, ratio = (float(x) for x in found.groups())
    assert on > off > 1  # a step is millions of instructions; export adds to them
    assert ratio == pytest.approx(on / off, abs=0.01)
