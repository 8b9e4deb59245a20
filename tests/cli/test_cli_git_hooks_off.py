"""Issue 28, point 2: coder-es's own git calls (outside the sandbox) never run a program the
workspace, the user's git configuration or the environment names.

A repository plants every hook point git documents (git-config(1), gitattributes(5),
githooks(5), git(1) ENVIRONMENT), each a script that leaves a marker file; ``coder-es run``
with the read-only ``explore`` preset (prompt building: ``git status``; the recorded repository
state: ``rev-parse``, ``diff``...) and a live replay (the repository rebuilt: ``clone``,
``checkout``, ``apply``) must leave no marker."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from cli_helpers import Cli, git, script, text, turn

from coder_es.workspace.safe_git import run_git


def _evil(bin_dir: Path, markers: Path, name: str, tail: str = "") -> str:
    """A script that leaves ``markers/name`` (then runs ``tail``: a filter passes data on)."""
    path = bin_dir / name
    path.write_text(f'#!/bin/sh\ntouch "{markers / name}"\n{tail}\n')
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def _plant(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every hook point of ``repo``, the user's git configuration and the environment, planted;
    returns the directory where a run program leaves its marker."""
    markers = tmp_path / "markers"
    markers.mkdir()
    bin_dir = tmp_path / "evil"
    bin_dir.mkdir()

    def evil(name: str, tail: str = "") -> str:
        return _evil(bin_dir, markers, name, tail)

    # Changes of every kind git reports, so that status, diff and apply look at the files.
    (repo / "notes.md").write_text("a\nchanged\nc\n")
    (repo / "src" / "app.py").write_text("x = 2\n")
    (repo / "data.txt").write_text("one\n")
    (repo / "odd.cfg").write_text("k = v\n")
    (repo / ".gitattributes").write_text(
        "*.md filter=x diff=y merge=z\n*.py diff=y\n*.cfg filter=a=b\n"
    )
    git(repo, "add", ".gitattributes", "data.txt", "odd.cfg")
    git(repo, "commit", "-qm", "attributes")
    (repo / "data.txt").write_text("one\ntwo\n")
    (repo / "odd.cfg").write_text("k = w\n")
    (repo / "src" / "staged.py").write_text("y = 1\n")
    git(repo, "add", "src/staged.py")

    hooks = repo / ".githooks"
    hooks.mkdir()
    for hook in ("post-checkout", "pre-auto-gc", "post-index-change", "pre-commit"):
        (hooks / hook).write_text(Path(evil(f"hook-{hook}")).read_text())
        (hooks / hook).chmod(0o755)
        (repo / ".git" / "hooks" / hook).write_text(Path(evil(f"githook-{hook}")).read_text())
        (repo / ".git" / "hooks" / hook).chmod(0o755)
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "attributes").write_text("*.txt filter=inc diff=inc\n")
    included = repo / ".git" / "more.config"
    included.write_text(
        f'[filter "inc"]\n\tclean = {evil("include-clean", "exec cat")}\n'
        f"\tsmudge = {evil('include-smudge', 'exec cat')}\n\trequired = true\n"
        f'[diff "inc"]\n\ttextconv = {evil("include-textconv", "exec cat $1")}\n'
    )
    settings = {
        "core.fsmonitor": evil("fsmonitor"),
        "core.hooksPath": ".githooks",
        "core.pager": evil("core-pager", "exec cat"),
        "pager.status": evil("pager-status", "exec cat"),
        "pager.diff": evil("pager-diff", "exec cat"),
        "core.sshCommand": evil("ssh-command"),
        "core.editor": evil("editor"),
        "diff.external": evil("diff-external"),
        "filter.x.clean": evil("filter-clean", "exec cat"),
        "filter.x.smudge": evil("filter-smudge", "exec cat"),
        "filter.x.process": evil("filter-process"),
        "filter.x.required": "true",
        "filter.a=b.clean": evil("filter-equals-clean", "exec cat"),
        "diff.y.command": evil("diff-command"),
        "diff.y.textconv": evil("diff-textconv", 'exec cat "$1"'),
        "merge.z.driver": evil("merge-driver"),
        "credential.helper": evil("credential-helper"),
        "include.path": "more.config",
    }
    for key, value in settings.items():
        git(repo, "config", key, value)

    # The user's own git configuration (an earlier command may have written it): a template
    # with hooks for every new clone, and the same hook points.
    templates = tmp_path / "templates" / "hooks"
    templates.mkdir(parents=True)
    (templates / "post-checkout").write_text(Path(evil("template-post-checkout")).read_text())
    (templates / "post-checkout").chmod(0o755)
    Path(os.environ["HOME"], ".gitconfig").write_text(
        f"[init]\n\ttemplateDir = {templates.parent}\n"
        f"[core]\n\tfsmonitor = {evil('global-fsmonitor')}\n"
        f'[filter "x"]\n\tsmudge = {evil("global-smudge", "exec cat")}\n'
        f"\tclean = {evil('global-clean', 'exec cat')}\n"
    )
    # And the environment coder-es was started in.
    monkeypatch.setenv("GIT_EXTERNAL_DIFF", evil("env-external-diff"))
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", f"'core.fsmonitor'='{evil('env-parameters')}'")
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "core.fsmonitor")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", evil("env-count"))
    monkeypatch.setenv("GIT_PAGER", evil("env-pager", "exec cat"))
    monkeypatch.setenv("GIT_SSH_COMMAND", evil("env-ssh"))
    monkeypatch.setenv("GIT_ASKPASS", evil("env-askpass"))
    # Racily clean: same size and mtime as the index saw, so git hashes the files again.
    for rel in ("notes.md", "data.txt", "odd.cfg", "src/app.py"):
        os.utime(repo / rel, (1_000_000_000, 1_000_000_000))
    return markers


def _planted_markers_work(repo: Path, markers: Path) -> None:
    """The planted points are live: plain git runs them (so the test proves something)."""
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_PAGER",)}
    import subprocess

    subprocess.run(["git", "status"], cwd=repo, env=env, capture_output=True, check=False)
    subprocess.run(["git", "diff"], cwd=repo, env=env, capture_output=True, check=False)
    ran = {p.name for p in markers.iterdir()}
    assert {"env-parameters", "filter-process", "include-clean", "hook-post-index-change"} <= ran
    for p in markers.iterdir():
        p.unlink()


def test_run_explore_runs_nothing_the_repository_names(
    cli: Cli, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    markers = _plant(repo, tmp_path, monkeypatch)
    _planted_markers_work(repo, markers)
    s = script(tmp_path / "s.json", turn(text("summary")))
    r, sid = cli.run_script("summarise", s, "--agent", "explore")
    assert r.code == 0, r.err
    assert sorted(p.name for p in markers.iterdir()) == []
    # And git still answered: the prompt's status and the recorded repository state.
    started = cli("show", sid, "--json").json_lines()[0]["fields"]["settings"]
    assert "M notes.md" in started["git_status"] or "notes.md" in started["git_status"]
    assert started["git"]["staged"] and started["git"]["unstaged"]


def test_live_replay_rebuilds_the_repository_running_nothing(
    cli: Cli, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (repo / "notes.md").write_text("a\nchanged\nc\n")
    (repo / "src" / "staged.py").write_text("y = 2\n")
    git(repo, "add", "src/staged.py")
    s = script(tmp_path / "s.json", turn(text("looked")))
    r, sid = cli.run_script("look", s)
    assert r.code == 0, r.err
    cassette = tmp_path / "git.cassette.jsonl"
    assert cli("record-cassette", sid, "-o", str(cassette)).code == 0
    markers = _plant(repo, tmp_path, monkeypatch)
    r = cli("replay", str(cassette), "--mode", "live")
    assert r.code == 0, r.out + r.err
    assert sorted(p.name for p in markers.iterdir()) == []


def test_a_recorded_repository_that_is_a_command_is_not_run(tmp_path: Path) -> None:
    # A cassette names the repository a live replay clones from: a transport URL that runs a
    # program (ext::) is refused, whatever the configuration allows.
    markers = tmp_path / "markers"
    markers.mkdir()
    target = tmp_path / "target"
    target.mkdir()
    url = f"ext::sh -c touch% {markers / 'ext'}"
    proc = run_git(tmp_path, "clone", "-q", url, str(target))
    assert proc.returncode != 0
    assert list(markers.iterdir()) == []
    # And the listing of a repository whose configuration git cannot read refuses to run git.
    bad = tmp_path / "bad"
    bad.mkdir()
    git(bad, "init", "-q")
    (bad / ".git" / "config").write_text("[core\n")
    with pytest.raises(OSError, match="git config --list failed"):
        run_git(bad, "status")
