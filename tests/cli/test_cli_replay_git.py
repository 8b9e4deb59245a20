"""Live replay of a session whose shell commands ran git, in a real repository."""

from __future__ import annotations

import shutil
from pathlib import Path

from cli_helpers import Cli, git, script, text, tool, turn


def _recorded(cli: Cli, repo: Path, tmp_path: Path) -> tuple[str, Path, str]:
    # The working tree differs from HEAD in every way git reports: modified, staged, deleted,
    # untracked; the workspace is a subdirectory of the repository.
    (repo / "notes.md").write_text("a\nchanged\nc\n")
    (repo / "src" / "staged.py").write_text("y = 2\n")
    git(repo, "add", "src/staged.py")
    git(repo, "rm", "-q", "--cached", "src/app.py")
    (repo / "src" / "app.py").unlink()
    (repo / "src" / "new.txt").write_text("untracked\n")
    head = git(repo, "rev-parse", "HEAD").strip()
    s = script(
        tmp_path / "s.json",
        turn(tool("bash", command="git status && git diff HEAD --stat && git log --oneline")),
        turn(tool("bash", command="echo more >> new.txt && git status --short && git diff")),
        turn(text("looked")),
    )
    sub = Cli(repo / "src", cli.capsys)
    r, sid = sub.run_script("git around", s)
    assert r.code == 0, r.err
    cassette = tmp_path / "git.cassette.jsonl"
    assert sub("record-cassette", sid, "-o", str(cassette)).code == 0
    return sid, cassette, head


def test_live_replay_rebuilds_the_repository(cli: Cli, repo: Path, tmp_path: Path) -> None:
    sid, cassette, _head = _recorded(cli, repo, tmp_path)
    outputs = [
        e["fields"]["output"]
        for e in cli("show", sid, "--json").json_lines()
        if e["kind"] == "ToolCallCompleted"
    ]
    assert "not a git repository" not in outputs[0] and "new file:   staged.py" in outputs[0]
    r = cli("replay", str(cassette), "--mode", "live")
    assert r.code == 0, r.out
    assert "IDENTICAL" in r.out or "identical" in r.out


def test_live_replay_names_the_repository_and_commit_it_needs(
    cli: Cli, repo: Path, tmp_path: Path
) -> None:
    _sid, cassette, head = _recorded(cli, repo, tmp_path)
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(repo), str(clone))
    moved = tmp_path / "moved"
    shutil.move(repo, moved)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    other = Cli(elsewhere, cli.capsys)
    r = other("replay", str(cassette), "--mode", "live")
    assert r.code == 2
    assert f"live replay needs repository {repo} at commit {head}" in r.out
    assert other("replay", str(cassette)).code == 0  # verify mode runs no command
    r = other("replay", str(cassette), "--mode", "live", "--repo", str(clone))
    assert r.code == 0, r.out
