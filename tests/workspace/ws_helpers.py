"""Helpers shared by the workspace tests (a module, so hypothesis tests can use them too)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def git_merge_file(tmp: Path, base: bytes, ours: bytes, theirs: bytes) -> tuple[bool, bytes]:
    """``git merge-file -p ours base theirs`` with labels ours/base/theirs: (clean, output)."""
    for name, data in (("base", base), ("ours", ours), ("theirs", theirs)):
        (tmp / name).write_bytes(data)
    p = subprocess.run(
        [
            "git",
            "merge-file",
            "-p",
            "-L",
            "ours",
            "-L",
            "base",
            "-L",
            "theirs",
            str(tmp / "ours"),
            str(tmp / "base"),
            str(tmp / "theirs"),
        ],
        capture_output=True,
        check=False,
    )
    assert p.returncode >= 0 and p.returncode < 128, p.stderr
    return p.returncode == 0, p.stdout
