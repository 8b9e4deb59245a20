"""Deterministic replay of harness sessions (issue 32, item 1): the REAL CLI against the fake
model records a session; ``record-cassette`` + ``replay`` verify it (its stream through the
current decoder) and replay it live (the CLI runs again in a scratch workspace, the proxy serves
the recorded answers: the model is not called); a changed agent set-up is the first divergence,
with both requests and a diff."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_model import standard_script
from harness_helpers import HarnessEnv, make_env, sandbox_reason

KINDS = [
    "claude",
    pytest.param("codex", marks=pytest.mark.slow),
    pytest.param("gemini", marks=pytest.mark.slow),
]


@pytest.fixture
def henv(tmp_path: Path, harness_bin: Path) -> Iterator[HarnessEnv]:
    reason = sandbox_reason(tmp_path)
    if reason:
        pytest.skip(f"harness sessions need the namespace sandbox: {reason}")
    yield from make_env(tmp_path, harness_bin, standard_script(str(tmp_path / "ws")))


def record(h: HarnessEnv, kind: str) -> tuple[str, Path]:
    (h.workspace / "README.md").write_text("the project before the session\n")
    done = h.cli("run", "--harness", kind, "--yes", "--json", "write the notes and make the file")
    assert done.returncode == 0, done.stderr
    sid = next(u["session_id"] for u in h.json_lines(done.stdout) if u["type"] == "session")
    again = h.cli("run", "--session", sid, "--yes", "--json", "and now?")
    assert again.returncode == 0, again.stderr
    cassette = h.workspace.parent / "session.cassette.jsonl"
    made = h.cli("record-cassette", sid, "-o", str(cassette))
    assert made.returncode == 0, made.stderr
    return sid, cassette


def replay(h: HarnessEnv, cassette: Path, mode: str) -> tuple[int, dict[str, Any]]:
    done = h.cli("replay", str(cassette), "--mode", mode, "--json", timeout=300)
    lines = h.json_lines(done.stdout)
    assert lines, done.stderr
    return done.returncode, lines[0]


def _shown(report: dict[str, Any]) -> str:
    d = report.get("divergence") or {}
    return f"{d.get('summary')}\n{d.get('diff')}" if d else json.dumps(report)


@pytest.mark.parametrize("kind", KINDS)
def test_a_harness_session_replays_identically_and_a_changed_set_up_diverges(
    kind: str, henv: HarnessEnv
) -> None:
    h = henv
    _sid, cassette = record(h, kind)
    recorded_requests = len(h.model.requests)

    code, report = replay(h, cassette, "verify")
    assert (code, report["status"]) == (0, "identical"), report
    assert report["replayed_events"] > 6

    code, report = replay(h, cassette, "live")
    assert (code, report["status"]) == (0, "identical"), _shown(report)
    assert report["model_calls"] >= 4  # 3 + 1 conversation requests, served from the recording
    assert len(h.model.requests) == recorded_requests  # the model was never called
    # the user's workspace is untouched by the replay (it ran in a scratch one)
    assert (h.workspace / "notes.md").exists()

    # A changed agent set-up: an instructions file the recording did not have.
    instructions = {
        "claude": h.home / ".claude" / "CLAUDE.md",
        "codex": h.home / ".codex" / "AGENTS.md",
        "gemini": h.home / ".gemini" / "GEMINI.md",
    }[kind]
    instructions.parent.mkdir(parents=True, exist_ok=True)
    instructions.write_text("Always answer in French. MARKER-INSTR-31\n")
    code, report = replay(h, cassette, "live")
    assert (code, report["status"]) == (1, "diverged"), report
    d = report["divergence"]
    assert d["what"] == "request" and d["kind"] == "ModelExchanged", d
    assert "MARKER-INSTR-31" in d["diff"] and "MARKER-INSTR-31" in json.dumps(d["actual"])
    assert "MARKER-INSTR-31" not in json.dumps(d["expected"])
    assert len(h.model.requests) == recorded_requests


def test_a_different_tool_result_or_file_effect_is_a_divergence(henv: HarnessEnv) -> None:
    """Verify mode: the recorded stream decodes to another output than the turn recorded.
    Live mode: the replayed harness's tool result, then its file effect, differ from the
    recording (the requests still match: the recording's own bodies are served)."""
    h = henv
    _sid, cassette = record(h, "claude")
    # The recording says the shell call's output was something else than its stream says.
    lines = cassette.read_text().splitlines()
    changed = []
    for line in lines:
        obj = json.loads(line)
        if obj.get("kind") == "ToolCallCompleted" and obj["fields"]["name"] == "Bash":
            obj["fields"]["output"] = "not what the stream says"
            line = json.dumps(obj)
        changed.append(line)
    cassette.write_text("\n".join(changed) + "\n")
    code, report = replay(h, cassette, "verify")
    assert (code, report["status"]) == (1, "diverged"), report
    assert report["divergence"]["kind"] == "ToolCallCompleted"
    assert "not what the stream says" in report["divergence"]["diff"]
    code, report = replay(h, cassette, "live")
    assert (code, report["status"]) == (1, "diverged"), report
    assert report["divergence"]["kind"] == "ToolCallCompleted"
    assert "not what the stream says" in report["divergence"]["diff"]

    # A file the recording says the harness wrote otherwise.
    cassette.write_text("\n".join(lines) + "\n")
    changed = []
    for line in lines:
        obj = json.loads(line)
        for change in obj.get("fields", {}).get("files_changed") or []:
            if change.get("path") == "notes.md":
                change["after"] = "0" * 64
                line = json.dumps(obj)
        changed.append(line)
    cassette.write_text("\n".join(changed) + "\n")
    code, report = replay(h, cassette, "live")
    assert (code, report["status"]) == (1, "diverged"), report
    assert report["divergence"]["kind"] == "files" and "notes.md" in report["divergence"]["diff"]


def test_a_replay_that_cannot_run_says_why(henv: HarnessEnv) -> None:
    h = henv
    _sid, cassette = record(h, "claude")
    h.env["PATH"] = "/usr/bin:/bin"
    done = h.cli("replay", str(cassette), "--mode", "live", "--json")
    assert done.returncode == 2, done.stderr
    line = h.json_lines(done.stdout)[0]
    assert line["status"] == "could not run" and "not on PATH" in line["error"], line


def configure(h: HarnessEnv, kind: str, limit: int, more: str = "") -> Path:
    """``[harnesses.mine]`` with an ``env`` that reaches every model request Claude Code sends
    (its output limit: ``max_tokens``)."""
    config = h.home / ".config" / "coder-es" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        f'[harnesses.mine]\nkind = "{kind}"\n'
        f'env = {{ CLAUDE_CODE_MAX_OUTPUT_TOKENS = "{limit}"{more} }}\n'
    )
    return config


def test_live_replay_runs_the_configured_harness_env_included(henv: HarnessEnv) -> None:
    """A session of a ``[harnesses.NAME]`` is replayed as ``run --session`` would continue it:
    the entry as configured now, its ``env`` included (the session records only the names:
    values may be credentials). Unchanged, the requests are the recorded ones; a changed value
    is the first divergence; another kind cannot run it."""
    h = henv
    configure(h, "claude-code", 1234)
    _sid, cassette = record(h, "mine")
    recorded_requests = len(h.model.requests)

    code, report = replay(h, cassette, "live")
    assert (code, report["status"]) == (0, "identical"), _shown(report)
    assert len(h.model.requests) == recorded_requests

    # A changed value is the first divergence; a variable added since is a note too.
    configure(h, "claude-code", 2345, ', ADDED_SINCE = "1"')
    code, report = replay(h, cassette, "live")
    assert (code, report["status"]) == (1, "diverged"), report
    d = report["divergence"]
    assert d["what"] == "request" and "max_tokens" in d["summary"], d
    assert "1234" in d["summary"] and "2345" in d["summary"], d
    assert any("configuration changed" in n and "ADDED_SINCE" in n for n in report["notes"])

    config = configure(h, "codex", 1234)
    code, report = replay(h, cassette, "live")
    assert (code, report["status"]) == (2, "could not run"), report
    assert "mine harness of kind claude-code" in report["error"], report
    # Verify mode runs no harness: it needs no configuration.
    config.write_text("")
    code, report = replay(h, cassette, "verify")
    assert (code, report["status"]) == (0, "identical"), report
