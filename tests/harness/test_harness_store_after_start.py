"""Issue 31 (figures): a new harness session's first turn opens the store, and takes the
session's lease, right after its harness's process has started. When that fails, the user gets
the store's one line, the harness's process group is killed at once, and nothing it did is
applied or recorded."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness_helpers import sandbox_reason

from coder_es.application import CoderApp
from coder_es.errors import SessionBusyError
from coder_es.harness.runner import HarnessSession
from coder_es.harness.spec import parse_harness
from coder_es.store.config import StoreConfig

REPO = Path(__file__).resolve().parents[2]

# A "harness" that changes the workspace at once, says it started (its HOME is writable outside
# the sandbox, as a CLI's state directory is) and, unless it is stopped, says so again later.
LATE_S = 2.0
HARNESS = (
    'acp:sh -c \'echo made > made.txt; echo up > "$HOME/started"; '
    f'sleep {LATE_S}; echo late > "$HOME/late"\''
)


def _workspace(tmp_path: Path) -> tuple[Path, Path]:
    workspace, home = tmp_path / "ws", tmp_path / "home"
    workspace.mkdir()
    home.mkdir()
    reason = sandbox_reason(workspace)
    if reason is not None:
        pytest.skip(f"the sandbox is not available here: {reason}")
    return workspace, home


def _cli(workspace: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
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
    return subprocess.run(
        [sys.executable, "-m", "coder_es.cli.main", "--workspace", str(workspace), *args],
        cwd=workspace,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _stopped_and_nothing_applied(workspace: Path, home: Path, since: float) -> None:
    # Long enough for a harness left running to have written its late mark.
    time.sleep(max(0.0, since + LATE_S + 1.0 - time.monotonic()))
    assert not (home / "late").exists(), "the harness went on after the store failed"
    assert not (workspace / "made.txt").exists(), "the harness's change was applied"


def test_a_store_that_does_not_open_stops_the_started_harness(tmp_path: Path) -> None:
    workspace, home = _workspace(tmp_path)
    damaged = workspace / ".coder-es" / "lmdb" / "data.mdb"
    damaged.parent.mkdir(parents=True)
    damaged.write_bytes(os.urandom(20000))
    since = time.monotonic()
    done = _cli(workspace, home, "run", "--harness", HARNESS, "--yes", "hello")
    # The line any command gives for this store, and nothing else (no traceback, no session).
    said = _cli(workspace, home, "sessions").stderr.strip()
    assert "damaged" in said
    assert done.returncode == 1
    assert done.stderr.strip() == said, done.stderr
    assert done.stdout == ""
    _stopped_and_nothing_applied(workspace, home, since)


def test_a_lease_held_by_another_writer_stops_the_started_harness(tmp_path: Path) -> None:
    workspace, home = _workspace(tmp_path)
    app = CoderApp(StoreConfig(backend="lmdb", path=workspace / ".coder-es"))
    try:
        session = HarnessSession.create(
            lambda: app,
            workspace,
            parse_harness(HARNESS),
            yes=True,
            environ={"PATH": os.environ["PATH"], "HOME": str(home)},
            store_path=(workspace / ".coder-es").resolve(),
        )
        # Another writer holds the session's lease (a new session's id is fresh, so this is
        # only the path a lease refused at the harness's start takes).
        other = app.leases.acquire(session.id, "another writer")
        shown: list[object] = []

        async def turn() -> None:
            async for update in session.send("hello"):
                shown.append(update)

        since = time.monotonic()
        try:
            with pytest.raises(SessionBusyError):
                asyncio.run(turn())
        finally:
            other.release()
        assert shown == []  # not even the session's opening: it was never started
        assert app.list_sessions(archived=None) == []
        _stopped_and_nothing_applied(workspace, home, since)
    finally:
        app.close()
