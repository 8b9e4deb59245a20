"""The pytest plugin, as a user's test suite sees it (a separate pytest process)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from replay_helpers import SESSIONS

TESTS = """
import shutil
from pathlib import Path

import pytest

GOOD = {good!r}
BAD = {bad!r}
MISSING = {missing!r}


def recorder(target: Path) -> None:
    shutil.copy(GOOD, target)


@pytest.mark.replay_cassette(GOOD, mode="live")
def test_good(replay_report):
    assert replay_report.ok and replay_report.mode == "live"


@pytest.mark.replay_cassette(BAD)
def test_bad(replay_report):
    pass


def test_missing_without_recorder(replay):
    replay("not-recorded.cassette.jsonl")


def test_missing_with_recorder(replay):
    report = replay(MISSING, recorder=recorder)
    assert report.ok
"""


def run_pytest(folder: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-rfE",
            *extra,
            str(folder / "test_user.py"),
        ],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_plugin_replays_fails_with_the_report_and_never_records_by_default(
    tmp_path: Path,
) -> None:
    good = tmp_path / "good.cassette.jsonl"
    shutil.copy(SESSIONS / "branched-rewind.cassette.jsonl", good)
    bad = tmp_path / "bad.cassette.jsonl"
    bad.write_text(
        good.read_text().replace(
            '"reason":"allow by preset:build:allow *"', '"reason":"allowed"', 1
        )
    )
    missing = tmp_path / "recorded-on-demand.cassette.jsonl"
    (tmp_path / "test_user.py").write_text(
        TESTS.format(good=str(good), bad=str(bad), missing=str(missing))
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    result = run_pytest(tmp_path)
    out = result.stdout
    assert result.returncode == 1, out
    # (the marked test fails in its fixture: pytest counts it as an error)
    assert "2 failed, 1 passed, 1 error" in out
    # The divergence report is the failure message.
    assert "bad: DIVERGED (verify mode) step 5 (PermissionDecided)" in out
    assert "diff (recorded -> replayed)" in out
    # Missing cassettes fail with how to record them, and nothing was recorded.
    assert "not-recorded.cassette.jsonl is not recorded" in out
    assert "run pytest with --replay-record to record it" in out
    assert not missing.exists()
    # --replay-record records what has a recorder, then replays it.
    result = run_pytest(tmp_path, "--replay-record", "-k", "with_recorder or good")
    assert result.returncode == 0, result.stdout
    assert missing.is_file() and "2 passed" in result.stdout
