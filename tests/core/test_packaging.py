"""Issue 19.1: an installed wheel carries everything the command line reads at run time."""

from __future__ import annotations

import fnmatch
import os
import subprocess
import tomllib
from pathlib import Path

import pytest

from coder_es.data import DATA, SESSIONS, bundled_script, bundled_scripts

REPO = Path(__file__).resolve().parents[2]


def test_every_data_file_is_declared_as_package_data() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["coder_es.data"]
    files = [
        p.relative_to(DATA).as_posix()
        for p in DATA.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".py"
    ]
    assert files
    undeclared = [f for f in files if not any(fnmatch.fnmatch(f, pat) for pat in patterns)]
    assert undeclared == []


def test_the_runtime_data_lives_in_the_package_not_in_the_checkout() -> None:
    from coder_es.cli.replay_cmds import bundled_cassettes

    assert bundled_cassettes() == SESSIONS
    assert SESSIONS.is_relative_to(REPO / "coder_es")
    assert bundled_scripts() == ["fix_add", "slow_turn"]
    assert bundled_script("fix_add") == DATA / "scripts" / "fix_add.json"
    assert bundled_script("../sessions/x") is None
    # The dependency graph's tree-sitter queries are package data of projections.depgraph.
    queries = REPO / "projections" / "depgraph" / "queries"
    assert sorted(queries.glob("*.scm"))


@pytest.mark.slow
def test_the_wheel_runs_the_demo_from_a_fresh_venv() -> None:
    """What .ci/run does before the test suite: build, install into a new venv (dependencies
    from the package index), run `coder-es demo` in an empty folder."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [str(REPO / ".ci" / "wheel-demo")], env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "branched-rewind: identical" in done.stdout
    assert "the wheel's coder-es demo ran from" in done.stdout
