"""Listing respects .gitignore the way git does (compared with ``git ls-files``)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from coder_es.workspace import Workspace
from coder_es.workspace.ignore import IgnoreMatcher, parse_gitignore

FILES = [
    "README.md",
    "main.py",
    "debug.log",
    "logs/today.log",
    "logs/keep.log",
    "build/out.o",
    "src/app.py",
    "src/app.pyc",
    "src/__pycache__/app.cpython-311.pyc",
    "src/gen/x.py",
    "src/gen/keep.py",
    "docs/a.md",
    "docs/sub/b.md",
    "docs/sub/c.txt",
    "deep/a/b/target.tmp",
    "deep/a/b/ok.txt",
    "#hash.txt",
    "!bang.txt",
    "space .txt",
    "data/file1.csv",
    "data/fileA.csv",
    "data/file10.csv",
    "nested/.gitignore",
    "nested/secret.key",
    "nested/inner/secret.key",
    "nested/public.key",
    "only_dir_rule/file",
    "only_dir_rule2",
    "anchored.txt",
    "sub/anchored.txt",
    ".coder-es/store.lmdb",
    ".env",
    "vendor/lib/x.js",
]

GITIGNORE = """\
# comments and blank lines are skipped

*.log
!logs/keep.log
build/
*.py[co]
__pycache__/
src/gen/*
!src/gen/keep.py
docs/**/*.txt
**/b/*.tmp
\\#hash.txt
\\!bang.txt
space\\ .txt
data/file[0-9].csv
only_dir_rule/
only_dir_rule2/
/anchored.txt
.env
vendor
"""


def make_repo(root: Path) -> None:
    for f in FILES:
        p = root / f
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f + "\n")
    (root / ".gitignore").write_text(GITIGNORE)
    (root / "nested/.gitignore").write_text("*.key\n!public.key\n")


def git_listing(root: Path) -> set[str]:
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    out = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return {p for p in out.split("\0") if p}


def test_listing_matches_git_ls_files(ws: Workspace, root: Path) -> None:
    make_repo(root)
    ours = set(ws.iter_files())
    expected = git_listing(root) - {".coder-es/store.lmdb"}
    assert ours == expected
    # Spot checks of the rules that are easy to get wrong.
    assert "logs/keep.log" in ours and "logs/today.log" not in ours
    assert "src/gen/keep.py" in ours and "src/gen/x.py" not in ours
    assert "sub/anchored.txt" in ours and "anchored.txt" not in ours
    assert "only_dir_rule2" in ours and "only_dir_rule/file" not in ours
    assert "nested/public.key" in ours and "nested/inner/secret.key" not in ours


def test_git_and_store_directories_are_never_listed(ws: Workspace, root: Path) -> None:
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref\n")
    (root / ".coder-es").mkdir()
    (root / ".coder-es" / "data").write_text("x")
    (root / "a.txt").write_text("a")
    assert list(ws.iter_files()) == ["a.txt"]
    assert sorted(ws.iter_files(include_ignored=True)) == ["a.txt"]


def test_listing_a_subdirectory_and_a_file(ws: Workspace, root: Path) -> None:
    make_repo(root)
    assert set(ws.iter_files("docs")) == {"docs/a.md", "docs/sub/b.md"}
    assert list(ws.iter_files("main.py")) == ["main.py"]
    assert ws.is_ignored("debug.log") and not ws.is_ignored("main.py")


def test_info_exclude_is_respected(root: Path) -> None:
    (root / ".git" / "info").mkdir(parents=True)
    (root / ".git" / "info" / "exclude").write_text("*.secret\n")
    (root / "x.secret").write_text("s")
    (root / "x.txt").write_text("t")
    assert list(IgnoreMatcher(root).walk()) == ["x.txt"]


def test_parse_skips_comments_and_blank_lines() -> None:
    rules = parse_gitignore("# c\n\n  \nfoo\n!bar\n")
    assert [(r.pattern, r.negate) for r in rules] == [("foo", False), ("!bar", True)]
