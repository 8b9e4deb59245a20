"""A read command runs with the cyclic collector seldom run and puts its thresholds back for what
follows (coder_es.cli.main._without_cycle_collection)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CODE = """
import gc, sys
sys.argv = ["coder-es", *sys.argv[1:]]
from coder_es.cli import main
seen = []
real = main.main
main.main = lambda **kw: seen.append(gc.get_threshold()[0]) or real(**kw)
try:
    main.run()
except SystemExit as e:
    print(e.code, seen, gc.get_threshold()[0], gc.get_freeze_count() > 0)
"""


def _run(tmp_path: Path, *args: str) -> str:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = subprocess.run(
        [sys.executable, "-c", CODE, *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    return done.stdout.strip().splitlines()[-1]


def test_a_read_command_runs_with_the_collector_seldom_and_puts_it_back(tmp_path: Path) -> None:
    # Young collections every 50,000 allocations while `sessions` ran; the default (700) again,
    # and the survivors frozen, after.
    assert _run(tmp_path, "sessions").split(" ", 1)[1] == "[50000] 700 True"


def test_other_commands_keep_the_collector(tmp_path: Path) -> None:
    assert _run(tmp_path, "--version") == "0 [700] 700 False"
