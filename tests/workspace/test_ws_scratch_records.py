"""Clean-up obeys only the records of temporary files this user's coder-es wrote (rule 4).

The next start removes the temporary files a killed restoration staged beside their targets,
from a record in ``.coder-es/tmp/`` (``atomic.note_batch``), and those written beside a target on
another file system, from the scratch journal. A record planted there (committed in a cloned
repository, written by a command) must delete nothing, and the scratch directory and its files
are never reached through a link."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from backends import REPO

from coder_es.workspace.atomic import JOURNAL, clean_scratch, note_batch, scratch_dir

# Notes a batch as a restoration does, then exits: its record is then a killed writer's.
NOTER = """
import os, sys
from pathlib import Path
from coder_es.workspace.atomic import note_batch, scratch_dir
ws = Path(sys.argv[1])
names = [n.replace("PID", str(os.getpid())) for n in sys.argv[2:]]
print(note_batch(scratch_dir(ws), names))
"""


def _noted_by_a_dead_process(ws: Path, *names: str) -> tuple[Path, int]:
    """The sealed record a restoration killed after ``note_batch`` leaves, and its pid
    (``PID`` in ``names`` is replaced by it: its temporary files' names carry it)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.run(
        [sys.executable, "-c", NOTER, str(ws), *names],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    record = Path(child.stdout.strip())
    assert record.is_file(), child.stdout + child.stderr
    return record, int(record.name.split(".")[0])


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, Path]:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    (ws / "d").mkdir(parents=True)
    outside.mkdir()
    (ws / "keep.txt").write_text("the user's\n")
    return ws, outside


def test_a_planted_batch_record_removes_nothing_and_is_said_once(
    places: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """The record a cloned repository commits: temporary-file names inside the workspace and,
    by absolute path, on another mount."""
    ws, outside = places
    victim = outside / ".9.abc.coder-es-tmp"
    victim.write_text("someone else's file with a temporary file's name\n")
    inside = ws / "d" / ".1.a1.coder-es-tmp"
    inside.write_text("the user's too\n")
    scratch = scratch_dir(ws)
    scratch.mkdir(parents=True)
    record = scratch / f"{_dead_pid()}.abcdef012345.coder-es-batch"
    record.write_text(f"{victim}\nd/.1.a1.coder-es-tmp\n")

    with caplog.at_level(logging.WARNING):
        assert clean_scratch(ws) == 0
        assert clean_scratch(ws) == 0  # opened again in the same process: said once
    assert victim.exists() and inside.exists()
    assert record.exists()  # left alone, as a refused transaction journal is
    lines = _warnings(caplog)
    assert len(lines) == 1, lines
    assert str(record) in lines[0] and "did not write" in lines[0]
    assert "nothing it names was removed" in lines[0]


def test_sealed_records_open_only_where_and_as_they_were_written(
    places: tuple[Path, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The next tries: a genuine record copied from another workspace, one renamed to a dead
    process's name, a damaged one (one line each, never a traceback)."""
    ws, outside = places
    other = tmp_path / "other"
    other.mkdir()
    victim = outside / ".9.abc.coder-es-tmp"
    victim.write_text("x\n")
    theirs, _ = _noted_by_a_dead_process(other, str(victim))
    scratch = scratch_dir(ws)
    scratch.mkdir(parents=True)
    copied = scratch / theirs.name
    copied.write_bytes(theirs.read_bytes())
    # A live record (this process's) given a dead process's name.
    live = note_batch(scratch, [str(victim)])
    assert live is not None
    renamed = scratch / f"{_dead_pid()}.{live.name.split('.', 1)[1]}"
    renamed.write_bytes(live.read_bytes())
    damaged = scratch / f"{_dead_pid()}.000000000000.coder-es-batch"
    sealed = json.loads(theirs.read_bytes())
    damaged.write_text(json.dumps({**sealed, "body": sealed["body"][:-3]}))

    with caplog.at_level(logging.WARNING):
        assert clean_scratch(ws) == 0
    assert victim.exists()
    lines = _warnings(caplog)
    assert len(lines) == 3, lines
    said = "\n".join(lines)
    assert "another workspace" in said and "another name" in said and "seal" in said
    assert all("Traceback" not in line for line in lines)


def test_a_sealed_record_removes_only_its_own_temporary_files_inside_the_workspace(
    places: tuple[Path, Path],
) -> None:
    ws, outside = places
    (outside / "x.coder-es-tmp").write_text("not the workspace's\n")
    (ws / "link").symlink_to(outside)
    (ws / "d" / ".1.a1.coder-es-tmp").write_text("another process's\n")
    record, pid = _noted_by_a_dead_process(
        ws,
        "keep.txt",
        "../outside/.PID.a1.coder-es-tmp",
        "link/.PID.a1.coder-es-tmp",
        "d/.PID.a1.coder-es-tmp",
        "d/.1.a1.coder-es-tmp",
        ".coder-es/.PID.a1.coder-es-tmp",
    )
    mine = f".{pid}.a1.coder-es-tmp"
    (ws / "d" / mine).write_text("left by the killed restoration\n")
    (outside / mine).write_text("not the workspace's\n")
    (ws / ".coder-es" / mine).write_text("the store's\n")

    assert clean_scratch(ws) == 1
    assert not (ws / "d" / mine).exists()
    assert (ws / "keep.txt").read_text() == "the user's\n"
    assert (ws / "d" / ".1.a1.coder-es-tmp").exists()
    assert (outside / mine).exists() and (outside / "x.coder-es-tmp").exists()
    assert (ws / ".coder-es" / mine).exists()
    assert not record.exists()


def test_the_scratch_directory_and_its_journal_are_never_reached_through_a_link(
    places: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """A repository commits ``.coder-es/tmp`` as a link to another directory, or the scratch
    journal as a link to a user's file: clean-up deletes nothing there and truncates nothing."""
    ws, outside = places
    dead = _dead_pid()
    stray = outside / f".{dead}.abc.coder-es-tmp"
    stray.write_text("someone else's\n")
    (ws / ".coder-es").mkdir()
    (ws / ".coder-es" / "tmp").symlink_to(outside)
    assert clean_scratch(ws) == 0
    assert stray.exists()

    (ws / ".coder-es" / "tmp").unlink()
    scratch = scratch_dir(ws)
    scratch.mkdir()
    precious = outside / "notes.txt"
    precious.write_text(f"{stray}\nthe user's notes\n")
    (scratch / JOURNAL).symlink_to(precious)
    with caplog.at_level(logging.WARNING):
        assert clean_scratch(ws) == 0
    assert precious.read_text() == f"{stray}\nthe user's notes\n"
    assert stray.exists()
    lines = _warnings(caplog)
    assert len(lines) == 1 and str(scratch / JOURNAL) in lines[0], lines


def test_a_planted_scratch_journal_line_removes_nothing(
    places: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    ws, outside = places
    stray = outside / f".x.{_dead_pid()}.abc.coder-es-tmp"
    stray.write_text("someone else's\n")
    scratch = scratch_dir(ws)
    scratch.mkdir(parents=True)
    (scratch / JOURNAL).write_text(f"{stray}\n")
    with caplog.at_level(logging.WARNING):
        assert clean_scratch(ws) == 0
    assert stray.exists()
    assert (scratch / JOURNAL).read_text() == f"{stray}\n"  # left alone
    lines = _warnings(caplog)
    assert len(lines) == 1 and "did not write" in lines[0], lines
