"""A read command runs without the cyclic collector and leaves it on for what follows
(coder_es.cli.main._without_cycle_collection)."""

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
main.main = lambda: seen.append(gc.isenabled()) or real()
try:
    main.run()
except SystemExit as e:
    print(e.code, seen, gc.isenabled(), gc.get_freeze_count() > 0)
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


def test_a_read_command_runs_without_the_collector_and_puts_it_back(tmp_path: Path) -> None:
    # The collector was off while `sessions` ran; on again, and the survivors frozen, after.
    assert _run(tmp_path, "sessions").split(" ", 1)[1] == "[False] True True"


def test_other_commands_keep_the_collector(tmp_path: Path) -> None:
    assert _run(tmp_path, "--version") == "0 [True] True False"
