"""A file name that is not valid UTF-8 (issue 17, point 6): a command creating one is recorded,
the chain verifies, rewind and checkout restore it byte for byte, exports and cassettes carry it,
and the command line shows it as ``\\xe9`` instead of crashing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agent_helpers import git_repo, text, tool, turn
from backends import PERSISTENT_BACKENDS, cli_store_args, cli_store_env, store_config_for

from coder_es.cli.main import main
from coder_es.domain.chain import canonical_json, shown
from coder_es.store.surrogates import escape_surrogates

NAME = b"caf\xe9.txt"
REPO_ROOT = Path(__file__).resolve().parents[2]


def names(root: Path) -> set[bytes]:
    return set(os.listdir(os.fsencode(root)))


@pytest.fixture(params=PERSISTENT_BACKENDS)
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Any:
    for var in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "CODER_ES_SCRIPT", "CODER_ES_PROVIDER"):
        monkeypatch.delenv(var, raising=False)
    config = store_config_for(request, request.param, tmp_path)
    for key, value in cli_store_env(config).items():
        monkeypatch.setenv(key, value)
    repo = git_repo(tmp_path / "repo", {"a.txt": "a\n"})

    def run(*args: str) -> int:
        return main(["--workspace", str(repo), *cli_store_args(config), *args])

    run.repo = repo  # type: ignore[attr-defined]
    return run


def test_a_command_creating_a_non_utf8_name_is_recorded_verified_and_rewound(
    cli: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo: Path = cli.repo
    script = tmp_path / "s.json"
    command = "printf made > $'caf\\xe9.txt'"
    script.write_text(
        json.dumps({"turns": [turn(tool("bash", command=command)), turn(text("done"))]})
    )
    assert cli("run", "make it", "--provider", "scripted", "--script", str(script), "--json") == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    sid = lines[0]["session_id"]
    assert NAME in names(repo)
    completed = [x for x in lines if x["type"] == "tool_completed"]
    assert completed and not completed[0]["is_error"]

    assert cli("verify", "--all") == 0
    assert cli("rewind", sid, "2") == 0
    assert NAME not in names(repo)
    assert cli("checkout", sid, "7") == 0
    assert (repo / os.fsdecode(NAME)).read_bytes() == b"made"
    out = capsys.readouterr().out
    assert "caf\\xe9.txt" in out  # what the user reads: the escaped name

    export = tmp_path / "s.jsonl"
    assert cli("export", sid, "--format", "jsonl", "-o", str(export)) == 0
    export.read_bytes().decode("utf-8")  # valid UTF-8 on disk
    assert cli("verify", str(export)) == 0
    for fmt in ("md", "html", "otel"):
        assert cli("export", sid, "--format", fmt, "-o", str(tmp_path / f"s.{fmt}")) == 0
    assert "caf\\xe9.txt" in (tmp_path / "s.md").read_text()

    cassette = tmp_path / "s.cassette.jsonl"
    assert cli("record-cassette", sid, "-o", str(cassette)) == 0
    assert cli("replay", str(cassette)) == 0
    assert cli("replay", str(cassette), "--mode", "live") == 0


def test_a_tree_holding_a_non_utf8_name_is_searched_and_read(
    cli: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo: Path = cli.repo
    (repo / os.fsdecode(NAME)).write_bytes(b"needle here\n")
    name = os.fsdecode(NAME)
    script = tmp_path / "s.json"
    calls = [
        tool("grep", pattern="needle"),
        tool("find", pattern="*.txt"),
        tool("read", path=name),
    ]
    script.write_text(json.dumps({"turns": [turn(*calls), turn(text("seen"))]}))
    assert cli("run", "look", "--provider", "scripted", "--script", str(script), "--json") == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    outputs = [x["output"] for x in lines if x["type"] == "tool_completed"]
    assert len(outputs) == 3
    assert f"{name}:1: needle here" in outputs[0]
    assert name in outputs[1].splitlines()
    assert "needle here" in outputs[2]
    assert cli("verify", "--all") == 0


def test_the_cli_prints_the_name_escaped(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo", {"a.txt": "a\n"})
    script = tmp_path / "s.json"
    script.write_text(
        json.dumps(
            {
                "turns": [
                    turn(tool("bash", command="printf x > $'caf\\xe9.txt'")),
                    turn(text("done")),
                ]
            }
        )
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT),
        "CODER_ES_STORE": str(tmp_path / "store"),
        "CODER_ES_BACKEND": "sqlite",
        "PYTHONIOENCODING": "utf-8",
    }
    args = [sys.executable, "-m", "coder_es.cli.main", "--workspace", str(repo)]
    run = subprocess.run(
        [*args, "run", "go", "--provider", "scripted", "--script", str(script)],
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    sid = (run.stdout + run.stderr).decode().split("session ", 1)[1].split()[0]
    tree = subprocess.run([*args, "tree", sid], env=env, capture_output=True, timeout=120)
    assert tree.returncode == 0 and b"caf\\xe9.txt" in tree.stdout
    assert b"Traceback" not in run.stderr + tree.stderr


def test_canonical_json_escapes_only_lone_surrogates() -> None:
    name = os.fsdecode(NAME)
    text_value = {"path": "naïve/日本.txt", "n": 1}
    # Text without surrogates is written exactly as before: existing chain hashes stay valid.
    assert canonical_json(text_value) == json.dumps(
        text_value, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    encoded = canonical_json({"path": name})
    assert encoded == '{"path":"caf\\udce9.txt"}'
    assert os.fsencode(json.loads(encoded)["path"]) == NAME
    assert escape_surrogates("plain") == "plain"
    assert shown(name) == "caf\\xe9.txt" and shown("\ud800") == "\\ud800"
