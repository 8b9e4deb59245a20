"""The rewind benchmark: 3,000 restored files cost at most 3x ``git checkout -- <files>``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from rewind import bench_many  # noqa: E402


@pytest.mark.slow
def test_rewinding_3000_files_costs_at_most_3x_git_checkout(tmp_path: Path) -> None:
    figures = bench_many(tmp_path, "lmdb", 10_000, 3000, reps=3)
    assert figures["rewind"] <= 3 * figures["git"], figures
    assert figures["checkout"] <= 3 * figures["git"], figures
