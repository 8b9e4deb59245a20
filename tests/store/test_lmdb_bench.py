"""The store benchmark runs end to end in its quick mode and reports every measurement."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from bench_loader import load_bench

ROOT = Path(__file__).resolve().parents[2]
DeviceCounters = load_bench("store").DeviceCounters


@pytest.mark.slow
def test_store_bench_quick_mode_reports_all_figures() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "store.py"), "--quick", "--no-postgres"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for title in (
        "single-event appends/s, durable",
        "single-event appends/s, crash-consistent",
        "events/s in 50-event batches",
        "4 writer threads",
        "4 writer processes",
        "reading a 5000-event session",
        "scanning a 20000-event notification log",
    ):
        assert title in out, out
    assert "lmdb / raw py-lmdb" in out
    assert "raw py-lmdb, all 4 batches per commit" in out
    assert "x sqlite" in out
    if DeviceCounters(tempfile.gettempdir()).stat is not None:
        # The device's own counters: a durable append flushes at least once on every backend.
        lines = out.split("costs the disk", 1)[1].splitlines()[1:3]
        for line in lines:
            name, flushes = line.split()[:2]
            assert name in ("lmdb", "sqlite") and float(flushes) >= 0.9, out
