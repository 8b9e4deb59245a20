"""Issue 31 (figures): ``run --harness`` starts its harness before importing what only a later
part of the command needs (bench/harness.py measures the time; this test keeps the modules of
hooks, resume and replay out of the path to the harness's start)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from harness_helpers import sandbox_reason

REPO = Path(__file__).resolve().parents[2]

# The modules loaded when the harness process is spawned (the first subprocess of the turn).
PROBE = """
import asyncio, json, sys
seen = {}
spawn = asyncio.create_subprocess_exec

async def spy(*args, **kw):
    seen.setdefault("modules", sorted(sys.modules))
    return await spawn(*args, **kw)

asyncio.create_subprocess_exec = spy
from coder_es.cli.main import main
try:
    code = main(sys.argv[1:])
except SystemExit as e:
    code = e.code
print(json.dumps({"code": code, **seen}), file=sys.stderr)
"""

# Used only by a turn with hooks, by a continued session (its resume plan, the tree, the file
# views of its log) or by a replay; a first turn without hooks reaches its harness without
# them. The renderer (rich) shows the turn's first line after the harness has started, and a
# new session's store (the application, the aggregate, LMDB) is opened after it too.
NOT_BEFORE_THE_HARNESS = (
    "coder_es.application",
    "coder_es.domain.session",
    "eventsourcing.application",
    "lmdb",
    "coder_es.harness.harness_hooks",
    "coder_es.harness.outside_hooks",
    "coder_es.hooks.command",
    "coder_es.tools",
    "coder_es.harness.resume",
    "coder_es.harness.serve",
    "coder_es.workspace.workspace",
    "projections.tree",
    "rich",
)


RUN = ("run", "--harness", "acp:true", "--yes", "hello")


def test_run_harness_spawns_before_importing_hooks_resume_and_the_store(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    reason = sandbox_reason(workspace)
    if reason is not None:
        pytest.skip(f"the sandbox is not available here: {reason}")
    home = tmp_path / "home"
    home.mkdir()
    env = {
        **os.environ,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "PYTHONPATH": str(REPO),
    }
    for name in ("CODER_ES_STORE", "CODER_ES_BACKEND", "CODER_ES_PROVIDER"):
        env.pop(name, None)
    # An "agent" that exits at once: the turn ends on an error, after the harness's start.
    done = subprocess.run(
        [*(sys.executable, "-c", PROBE, "--workspace", str(workspace)), *RUN],
        cwd=workspace,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    assert "modules" in report, done.stderr
    loaded = set(report["modules"])
    early = [m for m in NOT_BEFORE_THE_HARNESS if m in loaded]
    assert early == [], f"imported before the harness started: {early}"
    # The turn itself ran and was recorded as usual (it ended on the harness's error).
    assert report["code"] == 1, done.stderr
    shown = subprocess.run(
        [sys.executable, "-m", "coder_es.cli.main", "--workspace", str(workspace), "sessions"],
        cwd=workspace,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0 and "hello" in shown.stdout, shown.stdout + shown.stderr
