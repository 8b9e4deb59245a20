"""`coder-es run` with an OTLP endpoint set sends the session's spans as it runs, a resumed
session included (its agent and model looked up from its first event)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the telemetry extra is not installed")

from agent_helpers import git_repo, text, tool, turn

from coder_es.cli.main import main
from tests.telemetry.test_wire import Receiver


def test_run_exports_spans_live_and_after_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for var in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "CODER_ES_SCRIPT", "CODER_ES_PROVIDER"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CODER_ES_STORE", str(tmp_path / "store"))
    monkeypatch.setenv("CODER_ES_BACKEND", "sqlite")
    repo = git_repo(tmp_path / "repo", {"notes.md": "a\n"})
    receiver = Receiver()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    try:
        first = tmp_path / "s.json"
        first.write_text(
            json.dumps({"turns": [turn(tool("read", path="notes.md")), turn(text("seen"))]})
        )
        args = ["--workspace", str(repo), "run", "--script", str(first), "--json"]
        assert main([*args[:3], "look", *args[3:]]) == 0
        sid = json.loads(capsys.readouterr().out.splitlines()[0])["session_id"]
        second = tmp_path / "s2.json"
        second.write_text(json.dumps({"turns": [turn(text("again"))]}))
        resume = ["--workspace", str(repo), "run", "more", "--session", sid]
        assert main([*resume, "--script", str(second), "--json"]) == 0
    finally:
        receiver.close()
    spans = receiver.spans()
    turns = [s for s in spans if s.name.startswith("invoke_agent ")]
    assert len(turns) == 2
    # The resumed run knew the session's agent from its Started event: same span name.
    assert len({s.name for s in turns}) == 1
    assert sum(s.name.startswith("chat ") for s in spans) == 3
    assert [s.name for s in spans if s.name.startswith("execute_tool")] == ["execute_tool read"]


def test_a_resumed_turn_runs_under_the_last_recorded_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each ``run`` is a process of its own: the third one finds the session mid-way and names
    its turn after the model the second one switched to (a ``SettingsChanged``), not the
    ``Started`` one."""
    for var in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "CODER_ES_SCRIPT", "CODER_ES_PROVIDER"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CODER_ES_STORE", str(tmp_path / "store"))
    monkeypatch.setenv("CODER_ES_BACKEND", "sqlite")
    repo = git_repo(tmp_path / "repo", {"notes.md": "a\n"})
    receiver = Receiver()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    # The scripted provider's model is its script's name: another script, another model.
    script, other = tmp_path / "first.json", tmp_path / "other.json"
    for path in (script, other):
        path.write_text(json.dumps({"turns": [turn(text("ok"))]}))
    base = ["--workspace", str(repo), "run"]
    try:
        assert main([*base, "one", "--script", str(script), "--json"]) == 0
        sid = json.loads(capsys.readouterr().out.splitlines()[0])["session_id"]
        again = [*base, "--session", sid, "--script", str(other), "--json"]
        assert main([*again[:3], "two", *again[3:]]) == 0  # records SettingsChanged
        assert main([*again[:3], "three", *again[3:]]) == 0  # same settings: nothing new
    finally:
        receiver.close()
    turns = sorted(
        (
            int(next(a.value.string_value for a in s.attributes if a.key == "coder_es.node.id")),
            next(a.value.string_value for a in s.attributes if a.key == "gen_ai.request.model"),
        )
        for s in receiver.spans()
        if s.name.startswith("invoke_agent ")
    )
    assert [model for _, model in turns] == ["first", "other", "other"]
