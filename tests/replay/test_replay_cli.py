"""The command line: record-cassette, replay (single and batch, exit codes, JSON) and demo."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from replay_helpers import SESSIONS, record_session, text, tool

from coder_es.cli.main import main
from coder_es.store.config import StoreConfig
from replay.cassette import load_cassette


def test_record_cassette_exports_a_stored_session_that_replays(
    workspace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = StoreConfig(backend="sqlite", path=tmp_path / "store")
    app, sid = record_session(
        workspace,
        {"a.txt": "alpha\n", "b.txt": "beta\n"},
        [[tool("read", path="a.txt")], [text("ok")]],
        "read a",
        store=store,
    )
    app.close()
    out = tmp_path / "a.cassette.jsonl"
    code = main(
        [
            "--workspace",
            str(workspace),
            "--store",
            str(store.path),
            "--backend",
            "sqlite",
            "record-cassette",
            sid[:8],
            "-o",
            str(out),
        ]
    )
    assert code == 0
    assert f"wrote {out}: 8 events, 2 initial files" in capsys.readouterr().out
    exported = load_cassette(out)
    assert exported.session == sid and set(exported.files) == {"a.txt", "b.txt"}
    assert main(["replay", "--mode", "live", str(out)]) == 0
    touched = tmp_path / "touched.cassette.jsonl"
    main(
        [
            "--workspace",
            str(workspace),
            "--store",
            str(store.path),
            "--backend",
            "sqlite",
            "record-cassette",
            sid,
            "-o",
            str(touched),
            "--touched-only",
        ]
    )
    assert set(load_cassette(touched).files) == {"a.txt"}


def test_replay_exit_codes_and_batch_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "cassettes"
    folder.mkdir()
    good = folder / "a-good.cassette.jsonl"
    shutil.copy(SESSIONS / "user-edit-merged.cassette.jsonl", good)
    assert main(["replay", str(good)]) == 0
    assert "identical" in capsys.readouterr().out
    # A tampered recording: a decision the code derives (not an input it is served).
    bad = folder / "b-bad.cassette.jsonl"
    bad.write_text(
        good.read_text().replace(
            '"reason":"allow by preset:build:allow *"', '"reason":"allowed"', 1
        )
    )
    assert main(["replay", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "DIVERGED" in out and "first divergent step" in out
    assert main(["replay", "--json", str(folder)]) == 1
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line.get("ok") for line in lines[:2]] == [True, False]
    summary = lines[-1]["summary"]
    assert summary["identical"] == 1 and summary["diverged"] == 1
    assert summary["failures"][0]["cassette"] == "b-bad"
    (folder / "c-broken.cassette.jsonl").write_text("{oops\n")
    assert main(["replay", str(folder)]) == 2
    out = capsys.readouterr().out
    assert "3 cassettes: 1 identical, 1 diverged, 1 unreadable" in out
    assert main(["replay", str(tmp_path / "missing.cassette.jsonl")]) == 2


def test_demo_replays_live_into_the_workspace_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CODER_ES_STORE", raising=False)
    monkeypatch.delenv("CODER_ES_BACKEND", raising=False)
    assert main(["--workspace", str(tmp_path), "demo"]) == 0
    out = capsys.readouterr().out
    assert "identical" in out and "try next:" in out
    assert (tmp_path / ".coder-es").is_dir()
    demo = next((tmp_path / "coder-es-demo").iterdir())
    # The checkout at the end of the recorded session left the shouting version on disk.
    assert "HELLO" in (demo / "greet.py").read_text()
    assert "greet.py" in out and "shout" in out  # the tree shows the labels and files
    sid = demo.name
    assert main(["--workspace", str(tmp_path), "tree", sid]) == 0
    assert "polite" in capsys.readouterr().out
    assert main(["--workspace", str(tmp_path), "demo", "--cassette", "nope"]) == 2
