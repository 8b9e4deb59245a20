"""``coder-es forget`` and a missing or wrong sealing key, on the command line.

Forgetting destroys a session's sealed values and nothing else: ``verify`` still passes, ``tree``
and ``export`` still work, and continuing the session says the values were forgotten. A missing or
wrong key names the setting to fix, while what needs no sealed value keeps working.
"""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

import pytest

from coder_es.cli.main import main
from coder_es.userdirs import user_data_dir

KEY = "sk-proj-" + "Xq7vB2nL9pR4tY6wZ1cD3fG5hJ8kM0sA"


def _script(tmp_path: Path, n: int = 2) -> str:
    turns = [{"blocks": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn"}] * n
    path = tmp_path / "turns.json"
    path.write_text(json.dumps({"turns": turns}))
    return str(path)


def _start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[list[str], str]:
    ws = tmp_path / "ws"
    ws.mkdir()
    args = ["--workspace", str(ws), "--backend", "sqlite"]
    run = [*args, "run", f"deploy with {KEY}", "--provider", "scripted"]
    assert main([*run, "--script", _script(tmp_path), "--json"]) == 0
    sid = json.loads(capsys.readouterr().out.splitlines()[0])["session_id"]
    return args, sid


def _still_readable(args: list[str], sid: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*args, "tree", sid]) == 0
    assert main([*args, "verify", "--all"]) == 0
    assert main([*args, "export", sid, "--format", "jsonl"]) == 0
    out = capsys.readouterr().out
    assert KEY not in out and "[REDACTED:pattern:openai_key:" in out


def test_the_key_file_is_private_and_outside_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _start(tmp_path, capsys)
    key = user_data_dir() / "sealing.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert not key.is_relative_to(tmp_path / "ws")


def test_forget_then_verify_passes_and_resuming_says_what_is_gone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args, sid = _start(tmp_path, capsys)
    assert main([*args, "forget", sid]) == 0
    assert "1 had sealed values" in capsys.readouterr().out
    _still_readable(args, sid, capsys)
    resume = [*args, "run", "go on", "--session", sid, "--provider", "scripted"]
    assert main([*resume, "--script", _script(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "forgotten" in err and "Traceback" not in err


@pytest.mark.parametrize("damage", ["missing", "wrong"])
def test_a_missing_or_wrong_key_names_the_setting(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    damage: str,
) -> None:
    args, sid = _start(tmp_path, capsys)
    if damage == "missing":
        (user_data_dir() / "sealing.key").unlink()
    else:
        monkeypatch.setenv("CODER_ES_SEALING_KEY", base64.b64encode(os.urandom(32)).decode())
    _still_readable(args, sid, capsys)
    resume = [*args, "run", "go on", "--session", sid, "--provider", "scripted"]
    assert main([*resume, "--script", _script(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "CODER_ES_SEALING_KEY" in err and "Traceback" not in err, err


def test_forget_needs_exactly_one_selection(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args, sid = _start(tmp_path, capsys)
    assert main([*args, "forget"]) == 2
    assert main([*args, "forget", sid, "--all"]) == 2
    assert main([*args, "forget", "--expired"]) == 2
    assert "forget_after_days" in capsys.readouterr().err
    assert main([*args, "forget", "--older-than", "0", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["shredded"] == [sid]
