"""Issue 19.2: the command line finds the store the way git finds ``.git``; read-only commands
never create one; "no session matches" names the store it searched. Also 19.11: global options
are accepted after the command name."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from coder_es.cli.main import main

SCRIPT = {"turns": [{"blocks": [{"type": "text", "text": "hello"}], "stop_reason": "end_turn"}]}

READ_ONLY = [
    ["sessions"],
    ["sessions", "--json"],
    ["show", "abc"],
    ["tree", "abc", "--json"],
    ["diff", "abc", "1", "2"],
    ["verify", "--all"],
    ["verify", "abc"],
    ["export", "abc", "--format", "jsonl"],
    ["context", "abc"],
    ["record-cassette", "abc", "-o", "x.cassette.jsonl"],
    ["doctor"],
    ["deps"],
    # These write, but only to sessions already recorded: no store, nothing to write to.
    ["label", "abc", "1", "x"],
    ["fork", "abc"],
    ["checkout", "abc", "1"],
    ["rewind", "abc", "1"],
]


def _record(cwd: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> str:
    """A one-turn session recorded from ``cwd``; its id."""
    script = cwd / "turns.json"
    script.write_text(json.dumps(SCRIPT))
    monkeypatch.chdir(cwd)
    assert main(["run", "hi", "--script", str(script), "--json"]) == 0
    first = json.loads(capsys.readouterr().out.splitlines()[0])
    return str(first["session_id"])


def test_a_subdirectory_uses_the_projects_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "flask"
    (project / "src" / "flask").mkdir(parents=True)
    sid = _record(project, monkeypatch, capsys)

    monkeypatch.chdir(project / "src" / "flask")
    assert main(["sessions"]) == 0
    assert sid[:8] in capsys.readouterr().out
    assert main(["tree", sid[:8], "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["session"] == sid
    # Nothing was created where the command ran.
    assert not (project / "src" / "flask" / ".coder-es").exists()
    assert not (project / "src" / ".coder-es").exists()


def test_a_new_session_from_a_subdirectory_goes_to_the_projects_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "p"
    (project / ".coder-es").mkdir(parents=True)
    sub = project / "a" / "b"
    sub.mkdir(parents=True)
    sid = _record(sub, monkeypatch, capsys)
    assert not (sub / ".coder-es").exists()
    monkeypatch.chdir(project)
    assert main(["sessions", "--json"]) == 0
    assert [json.loads(x)["id"] for x in capsys.readouterr().out.splitlines()] == [sid]


@pytest.mark.parametrize("argv", READ_ONLY, ids=lambda a: " ".join(a))
def test_read_only_commands_never_create_a_store(
    argv: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    code = main(argv)
    out, err = capsys.readouterr()
    assert not (tmp_path / ".coder-es").exists()
    assert "Traceback" not in out + err
    if argv[0] in ("sessions", "doctor", "deps"):
        assert code == 0
    else:
        assert code == 2
        assert f"no coder-es store at {tmp_path / '.coder-es'}" in err


def test_sessions_without_a_store_says_where_it_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CODER_ES_CEILING_DIRECTORIES", str(tmp_path))
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    assert main(["sessions"]) == 0
    out = capsys.readouterr().out
    assert f"no sessions: no coder-es store at {deep / '.coder-es'}" in out
    assert f"no .coder-es/ in {deep} or its parents up to {tmp_path / 'a'}" in out
    assert main(["sessions", "--json"]) == 0
    assert capsys.readouterr().out == ""


def test_tree_of_an_unknown_session_after_the_store_was_deleted_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _record(tmp_path, monkeypatch, capsys)
    shutil.rmtree(tmp_path / ".coder-es")
    assert main(["tree", "NO_SUCH_SESSION", "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "no coder-es store at" in err
    assert not (tmp_path / ".coder-es").exists()


def test_no_session_matches_names_the_store_it_searched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _record(tmp_path, monkeypatch, capsys)
    for argv in (["tree", "zzzz"], ["show", "zzzz"], ["export", "zzzz", "--format", "md"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"no unique session matches 'zzzz' in the store {tmp_path / '.coder-es'}" in err


def test_workspace_flag_overrides_the_search(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    outer = tmp_path / "outer"
    inner = outer / "inner"
    inner.mkdir(parents=True)
    sid = _record(outer, monkeypatch, capsys)
    monkeypatch.chdir(inner)
    # --workspace names the workspace and so its store: not the one found above the cwd.
    assert main(["--workspace", str(inner), "sessions", "--json"]) == 0
    assert capsys.readouterr().out == ""
    # ... before or after the command name.
    assert main(["sessions", "--json", "--workspace", str(outer)]) == 0
    assert json.loads(capsys.readouterr().out)["id"] == sid


def test_the_ceiling_stops_the_search(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _record(tmp_path, monkeypatch, capsys)
    sub = tmp_path / "sub"
    sub.mkdir()
    monkeypatch.chdir(sub)
    monkeypatch.setenv("CODER_ES_CEILING_DIRECTORIES", str(tmp_path))
    assert main(["sessions", "--json"]) == 0
    assert capsys.readouterr().out == ""


def test_global_options_after_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    # The worker is refused for its backend, not for where --backend was written.
    assert main(["worker", "--backend", "sqlite", "--until-empty"]) == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments" not in err
    assert "postgres" in err
    # An option after the command does not undo the same option before it.
    store = tmp_path / "elsewhere"
    assert main(["--store", str(store), "--backend", "sqlite", "doctor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["backend"] == "sqlite"
    assert report["store"] == str(store / "events.sqlite")
    assert main(["doctor", "--json", "--backend", "sqlite", "--store", str(store)]) == 0
    assert json.loads(capsys.readouterr().out)["store"] == str(store / "events.sqlite")
