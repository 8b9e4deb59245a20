"""The rewind benchmark: 3,000 restored files cost at most 3x ``git checkout -- <files>``."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench_loader import load_bench

bench_many = load_bench("rewind").bench_many


@pytest.mark.slow
def test_rewinding_3000_files_costs_at_most_3x_git_checkout(tmp_path: Path) -> None:
    figures = bench_many(tmp_path, "lmdb", 10_000, 3000, reps=3)
    assert figures["rewind"] <= 3 * figures["git"], figures
    assert figures["checkout"] <= 3 * figures["git"], figures
