"""The .gitignore rules the scan and the updates follow."""

from __future__ import annotations

import os
from pathlib import Path

from projections.depgraph.scan import IgnoreRules, _read


def test_gitignore_semantics() -> None:
    rules = IgnoreRules(
        {
            ".gitignore": b"# comment\n*.log\n/top.py\nbuild/\ndocs/**/gen\n!important.log\n",
            "sub/.gitignore": b"local.py\n!top.py\n",
        }
    )
    assert rules.ignored("a.log") and rules.ignored("deep/dir/a.log")
    assert not rules.ignored("important.log")
    assert rules.ignored("top.py") and not rules.ignored("x/top.py")  # anchored
    assert rules.ignored("build/x.py") and rules.ignored("a/build/x.py")  # a directory anywhere
    assert not rules.ignored("build")  # ``build/`` only matches directories
    assert rules.ignored("docs/gen/x.py") and rules.ignored("docs/a/b/gen/x.py")
    assert rules.ignored("sub/local.py") and not rules.ignored("local.py")  # nested file's scope
    # a file in an excluded directory cannot be re-included
    assert rules.ignored("build/important.log")
    assert not IgnoreRules({}).ignored("anything.py")


def test_a_file_swapped_for_a_link_or_a_fifo_after_the_scan_is_not_read(tmp_path: Path) -> None:
    # Issue 28: the graph's reads run outside the sandbox; an entry replaced between the scan
    # and the read (by a link to a file outside the workspace, or a FIFO) is skipped, neither
    # followed nor waited on.
    outside = tmp_path / "secret.txt"
    outside.write_text("TOKEN = 1\n")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.py").write_text("x = 1\n")
    assert _read(str(ws / "a.py")) == b"x = 1\n"
    (ws / "a.py").unlink()
    (ws / "a.py").symlink_to(outside)
    assert _read(str(ws / "a.py")) is None
    os.mkfifo(ws / "b.py")
    assert _read(str(ws / "b.py")) is None
