"""`coder-es run` from the command line (in-process through main())."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from agent_helpers import git_repo, plan_commands_are_read_only, text, tool, turn

from coder_es.cli.main import main


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for var in (
        "ANTHROPIC_API_KEY",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "CODER_ES_SCRIPT",
        "CODER_ES_PROVIDER",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CODER_ES_STORE", str(tmp_path / "store"))
    monkeypatch.setenv("CODER_ES_BACKEND", "sqlite")
    return git_repo(tmp_path / "repo", {"notes.md": "a\n", "secrets/k": "s\n"})


def script(path: Path, *turns: dict[str, Any]) -> str:
    path.write_text(json.dumps({"turns": list(turns)}))
    return str(path)


def run(repo: Path, *args: str) -> int:
    return main(["--workspace", str(repo), "run", *args])


def test_json_output_names_the_session_first_and_resume_by_prefix(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = script(tmp_path / "s.json", turn(tool("bash", command="cat notes.md")), turn(text("seen")))
    assert run(repo, "look", "--script", s, "--json") == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert lines[0]["type"] == "session" and not lines[0]["resumed"]
    types = [x["type"] for x in lines]
    assert types[1] == "user_message" and types[-1] == "turn_ended"
    assert {"tool_started", "tool_completed", "model_response", "text_delta"} <= set(types)
    sid = lines[0]["session_id"]
    s2 = script(tmp_path / "s2.json", turn(text("again")))
    assert run(repo, "more", "--session", sid[:6], "--script", s2, "--json") == 0
    again = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert again[0]["session_id"] == sid and again[0]["resumed"]


def test_without_a_provider_it_explains_how_to_run_offline(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(repo, "hello") == 2
    err = capsys.readouterr().err
    assert "ANTHROPIC_API_KEY" in err and "--provider scripted --script" in err


def test_bad_usage_exits_2(repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s = script(tmp_path / "s.json", turn(text("x")))
    assert run(repo, "x", "--script", s, "--allow", "rm:*") == 2
    assert "unknown tool 'rm'" in capsys.readouterr().err
    assert run(repo, "x", "--script", str(tmp_path / "missing.json")) == 2
    assert run(repo, "x", "--script", s, "--session", "nope") == 2
    assert run(repo, "--script", s) == 2


def test_deny_rules_and_yes(repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s = script(
        tmp_path / "s.json",
        turn(tool("write", path="secrets/new", content="x"), tool("bash", command="touch made")),
        turn(text("done")),
    )
    code = run(
        repo,
        "go",
        "--script",
        s,
        "--agent",
        "plan",
        "--allow",
        "write",
        "--deny",
        "write:secrets/**",
        "--yes",
        "--json",
    )
    assert code == 0
    decided = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    decided = [x for x in decided if x["type"] == "permission_decided"]
    assert [(x["tool"], x["decision"], x["decided_by"]) for x in decided] == [
        ("write", "deny", "rule"),
        ("bash", "allow", "user"),
    ]
    assert not (repo / "secrets/new").exists()
    # The plan agent's commands run on a read-only file system where the sandbox works.
    assert (repo / "made").exists() != plan_commands_are_read_only(repo)


def test_human_output_streams_text_and_shows_tools(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = script(
        tmp_path / "s.json",
        turn(text("Checking."), tool("read", path="notes.md")),
        turn(text("All good.")),
    )
    assert run(repo, "check", "--script", s) == 0
    out = capsys.readouterr()
    assert "Checking." in out.out and "All good." in out.out
    assert "read" in out.err and "notes.md" in out.err


def test_fixture_scripts_run_offline(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fixture = Path(__file__).resolve().parents[2] / "coder_es/data/scripts/fix_add.json"
    assert run(repo, "look around", "--script", str(fixture), "--agent", "plan", "--json") == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    completed = [x for x in lines if x["type"] == "tool_completed"]
    assert [x["name"] for x in completed] == ["find", "grep", "bash"]
    assert not any(x["is_error"] for x in completed)


def test_chat_prompts_for_permissions_and_quits(repo: Path, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    s = script(
        tmp_path / "s.json",
        turn(tool("bash", command="touch chatted")),
        turn(text("made it")),
        turn(tool("bash", command="touch again")),
        turn(text("second")),
    )
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "coder_es.cli.main",
            "--workspace",
            str(repo),
            "chat",
            "--agent",
            "plan",
            "--script",
            s,
        ],
        input="make a file\no\nmake another\nr\nnot now\n/exit\n",
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert proc.returncode == 0, proc.stderr
    assert "made it" in proc.stdout and "second" in proc.stdout
    assert "permission" in proc.stderr and "touch chatted" in proc.stderr
    assert (repo / "chatted").exists() != plan_commands_are_read_only(repo)
    assert not (repo / "again").exists()
    assert "not now" in proc.stderr  # the rejection reason is shown


def test_run_ends_with_the_turns_usage_and_cost(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    used = {"usage": {"input_tokens": 1000, "output_tokens": 200}}
    s = script(tmp_path / "s.json", turn(text("hello"), **used))
    assert run(repo, "hi", "--script", s) == 0
    # A script's model is its file name: no price is known for it, and none is guessed.
    assert "usage in=1000 out=200 unknown (no price for s)\n" in capsys.readouterr().err
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "coder-es" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("[providers.scripted.prices.s]\ninput = 3\noutput = 15\n")
    assert run(repo, "hi", "--script", s, "--json") == 0
    sid = json.loads(capsys.readouterr().out.splitlines()[0])["session_id"]
    assert run(repo, "again", "--session", sid, "--script", s) == 0
    # This turn's: 1000 x $3 + 200 x $15 per million tokens, not the session's two turns.
    assert "usage in=1000 out=200 $0.006000\n" in capsys.readouterr().err
