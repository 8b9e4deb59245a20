"""Issue 19.11: the small findings, as a user sees them (messages and exit codes)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from coder_es.cli.main import main
from coder_es.data import SCRIPTS

REPO = Path(__file__).resolve().parents[2]


def test_a_file_that_is_not_a_script_is_named_with_what_is_wrong(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    readme = REPO / "README.md"
    assert main(["run", "hi", "--script", str(readme)]) == 2
    err = capsys.readouterr().err
    assert "missing" not in err
    assert f"script {readme} is not valid JSON" in err

    listing = tmp_path / "list.json"
    listing.write_text('{"nope": 1}')
    assert main(["run", "hi", "--script", str(listing)]) == 2
    assert 'expected a list of turns or {"turns": [...]}' in capsys.readouterr().err

    good_json_bad_name = tmp_path / "turns.txt"
    good_json_bad_name.write_text((SCRIPTS / "fix_add.json").read_text())
    assert main(["run", "hi", "--script", str(good_json_bad_name)]) == 2
    assert "must be named *.json or *.jsonl" in capsys.readouterr().err

    assert main(["run", "hi", "--script", str(tmp_path)]) == 2
    assert "is a directory, not a script file" in capsys.readouterr().err

    binary = tmp_path / "bin.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    assert main(["run", "hi", "--script", str(binary)]) == 2
    assert "not a text file" in capsys.readouterr().err

    assert main(["run", "hi", "--script", "no_such_script"]) == 2
    err = capsys.readouterr().err
    assert "cannot read the script no_such_script: no such file" in err
    assert "bundled examples: fix_add, slow_turn" in err


def test_a_bundled_example_script_runs_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["run", "look around", "--provider", "scripted", "--script", "fix_add"]) == 0
    assert main(["sessions", "--json"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert json.loads(lines[-1])["provider"] == "scripted"


def test_doctor_reports_a_config_typo_as_a_finding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / ".coder-es").mkdir()
    (tmp_path / ".coder-es" / "config.toml").write_text('modle = "x"\n')
    monkeypatch.chdir(tmp_path)
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    config = tmp_path / ".coder-es" / "config.toml"
    assert (
        f"problem: config: {config}:1: unknown key 'modle'; did you mean 'model' or 'models'?"
        in out
    )
    assert "healthy: no" in out
    # No Python repr anywhere: no dicts, lists or True/False.
    assert "{" not in out and "[" not in out and "True" not in out and "False" not in out
    assert "anthropic no" in out

    assert main(["doctor", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["healthy"] is False
    assert report["problems"] == [
        f"config: {config}:1: unknown key 'modle'; did you mean 'model' or 'models'?"
    ]


def test_doctor_on_a_healthy_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["run", "x", "--script", "fix_add"]) == 0
    capsys.readouterr()
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "healthy: yes" in out
    assert "sessions: 1" in out


def test_replay_keep_workspace_names_the_workspace_in_text_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    cassette = REPO / "coder_es" / "data" / "sessions" / "denied-permission.cassette.jsonl"
    assert main(["replay", str(cassette), "--keep-workspace"]) == 0
    out = capsys.readouterr().out
    assert "identical" in out
    kept = out.split("scratch workspace kept at ", 1)[1].split()[0]
    assert Path(kept).is_dir()


def test_demo_suggests_a_checkout_the_session_can_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    # This session has no label v1 (the one the demo used to suggest for every cassette).
    assert main(["demo", "--cassette", "denied-permission"]) == 0
    out = capsys.readouterr().out
    suggested = [line.strip() for line in out.splitlines() if " checkout " in line]
    assert len(suggested) == 1
    argv = shlex.split(suggested[0])[1:]
    assert main(argv) == 0, capsys.readouterr().err
    assert "head:" in capsys.readouterr().out
