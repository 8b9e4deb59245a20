"""kill -9 during a write leaves no temporary files in the user's tree (issue 18.6)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from backends import REPO

from coder_es.store.blobs import MemoryBlobStore
from coder_es.workspace.atomic import clean_scratch, compare_and_swap_at, scratch_dir
from coder_es.workspace.workspace import Workspace

# Writes a large file over and over through the atomic write, until killed.
WRITER = """
import os, sys
from pathlib import Path
from coder_es.workspace.atomic import compare_and_swap_at, scratch_dir
ws, target = Path(sys.argv[1]), Path(sys.argv[2])
dir_fd = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY)
data = [os.urandom(1 << 20) * 8, os.urandom(1 << 20) * 8]
prev = target.read_bytes() if target.exists() else None
print("writing", flush=True)
i = 0
while True:
    assert compare_and_swap_at(
        dir_fd, target.name, data[i % 2], expected=prev, scratch=scratch_dir(ws)
    )
    prev = data[i % 2]
    i += 1
"""


def _kill_writers(ws: Path, target: Path, kills: int) -> None:
    rng = random.Random(18)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for _ in range(kills):
        child = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(ws), str(target)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert child.stdout is not None and child.stdout.readline().strip() == "writing"
        time.sleep(rng.uniform(0.02, 0.3))
        child.send_signal(signal.SIGKILL)
        child.wait()


def _leftovers(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.endswith(".coder-es-tmp")]


def test_killed_writers_leave_nothing_in_the_tree_and_the_next_start_cleans_up(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    target = ws / "src" / "big.bin"
    _kill_writers(ws, target, kills=8)
    scratch = scratch_dir(ws)
    # Nothing beside the user's files, whatever moment the kills hit.
    assert [p for p in _leftovers(ws) if scratch not in p.parents] == []
    assert len(target.read_bytes()) == 8 << 20  # the file is always whole
    assert _leftovers(scratch), "no kill landed mid-write: the test proves nothing"
    # The next start (a workspace opened by any command) removes what the killed writers left.
    Workspace(ws, MemoryBlobStore(), lambda _e: None)
    assert _leftovers(ws) == []


def test_a_target_on_another_file_system_is_cleaned_through_the_journal(tmp_path: Path) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("no second file system (/dev/shm) to write to")
    ws = tmp_path / "ws"
    ws.mkdir()
    with tempfile.TemporaryDirectory(dir=shm) as other:
        target = Path(other) / "mounted.bin"
        _kill_writers(ws, target, kills=4)
        # Sealed records (coder_es.workspace.authentic), each naming one temporary file.
        journal = (scratch_dir(ws) / "elsewhere").read_text().splitlines()
        paths = [json.loads(json.loads(line)["body"])["path"] for line in journal]
        assert paths and all(Path(p).parent == target.parent for p in paths)
        clean_scratch(ws)
        assert _leftovers(Path(other)) == []
        assert (scratch_dir(ws) / "elsewhere").read_text() == ""
        # Writing there still works (and journals its temporary file again).
        dir_fd = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            assert compare_and_swap_at(
                dir_fd, target.name, b"x", expected=target.read_bytes(), scratch=scratch_dir(ws)
            )
        finally:
            os.close(dir_fd)
        assert target.read_bytes() == b"x"
