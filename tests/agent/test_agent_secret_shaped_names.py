"""A credential-shaped file name is data, not text (issue 29, item 8).

Reproduced: after ``touch ghp_<36 chars>.txt`` the events hold the name redacted (sealed), and
rewind reported ``unchanged [REDACTED:...].txt`` and left the real file, checkout created a file
literally named ``[REDACTED:pattern:github_token:...].txt``, and record-cassette wrote the real
name in clear. Effects now resolve the sealed name (the store keeps it sealed), and a cassette
carries the name redacted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agent_helpers import git_repo, text, tool, turn

from coder_es.cli.main import main

NAME = "ghp_" + "R8mN2xQ5vB7cL1kJ4hG6fD9sA3zW0yT5uI8o" + ".txt"
USERS = "ghp_" + "Z1xC2vB3nM4aS5dF6gH7jK8lQ9wE0rT1yU2i" + ".md"


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    for var in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "CODER_ES_SCRIPT", "CODER_ES_PROVIDER"):
        monkeypatch.delenv(var, raising=False)
    repo = git_repo(tmp_path / "repo", {"a.txt": "a\n"})
    store = ["--store", str(tmp_path / "store"), "--backend", "sqlite"]

    def run(*args: str) -> int:
        return main(["--workspace", str(repo), *store, *args])

    run.repo = repo  # type: ignore[attr-defined]
    run.store = tmp_path / "store"  # type: ignore[attr-defined]
    return run


def _session(cli: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> str:
    script = tmp_path / "s.json"
    script.write_text(
        json.dumps({"turns": [turn(tool("bash", command=command)), turn(text("done"))]})
    )
    assert cli("run", "make it", "--provider", "scripted", "--script", str(script), "--json") == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    return str(lines[0]["session_id"])


def _listing(root: Path) -> set[str]:
    return {p.name for p in root.iterdir()}


def _store_bytes(store: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(store.rglob("*")) if p.is_file())


def test_rewind_and_checkout_use_the_real_name(
    cli: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo: Path = cli.repo
    sid = _session(cli, tmp_path, capsys, f"printf made > {NAME}")
    assert (repo / NAME).read_text() == "made"
    assert NAME.encode() not in _store_bytes(cli.store)  # the store keeps it sealed
    assert cli("rewind", sid, "2") == 0
    out = capsys.readouterr().out
    assert NAME not in _listing(repo), out
    assert not any("REDACTED" in n for n in _listing(repo))
    assert cli("checkout", sid, "7", "--json") == 0
    capsys.readouterr()
    assert (repo / NAME).read_text() == "made"
    assert not any("REDACTED" in n for n in _listing(repo))
    assert cli("verify", "--all") == 0


def test_a_changed_file_with_such_a_name_is_restored_by_content(
    cli: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo: Path = cli.repo
    (repo / NAME).write_text("before\n")
    sid = _session(cli, tmp_path, capsys, f"printf after > {NAME}")
    assert (repo / NAME).read_text() == "after"
    assert cli("rewind", sid, "2") == 0
    assert (repo / NAME).read_text() == "before\n"
    assert not any("REDACTED" in n for n in _listing(repo))


def test_record_cassette_does_not_write_the_name_in_clear(
    cli: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo: Path = cli.repo
    (repo / USERS).write_text("the user's file\n")  # listed with the workspace
    sid = _session(cli, tmp_path, capsys, f"printf made > {NAME}")
    cassette = tmp_path / "s.cassette.jsonl"
    assert cli("record-cassette", sid, "-o", str(cassette)) == 0
    data = cassette.read_text()
    assert NAME not in data and USERS not in data and "[REDACTED:pattern:github_token" in data
    assert cli("replay", str(cassette)) == 0


def test_a_forgotten_name_is_left_alone_and_said(
    cli: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo: Path = cli.repo
    sid = _session(cli, tmp_path, capsys, f"printf made > {NAME}")
    assert cli("forget", sid) == 0
    capsys.readouterr()
    cli("rewind", sid, "2")
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    assert (repo / NAME).read_text() == "made"  # not removed under a name no one can resolve
    assert not any("REDACTED" in n for n in _listing(repo))
