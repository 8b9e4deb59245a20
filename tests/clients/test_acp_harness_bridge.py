"""``coder-es acp --harness NAME`` driven by an editor written with the official TypeScript ACP
SDK (issue 32, item 3): coder-es is the ACP bridge in front of the REAL harness CLI (against the
fake model of ``tests/harness``): the turn's tool calls reach the editor, what our rules leave
to the user is asked of the editor and recorded, the slash commands work on the harness
session, modes are the agent presets."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HARNESS_TESTS = Path(__file__).resolve().parents[1] / "harness"
sys.path.insert(0, str(HARNESS_TESTS))

from fake_model import standard_script  # noqa: E402
from harness_helpers import HarnessEnv, install_harness_clis, make_env, sandbox_reason  # noqa: E402
from test_acp_ts_sdk import TS_CLIENT, ts_sdk  # noqa: E402, F401

REPO = Path(__file__).resolve().parents[2]

KINDS = [
    "claude",
    pytest.param("codex", marks=pytest.mark.slow),
    pytest.param("gemini", marks=pytest.mark.slow),
    pytest.param("acp:claude-agent-acp", marks=pytest.mark.slow),
]


@pytest.fixture
def henv(tmp_path: Path) -> Iterator[HarnessEnv]:
    reason = sandbox_reason(tmp_path)
    if reason:
        pytest.skip(f"harness sessions need the namespace sandbox: {reason}")
    bin_dir = install_harness_clis()
    for h in make_env(tmp_path, bin_dir, standard_script(str(tmp_path / "ws"))):
        config = h.home / ".config" / "coder-es"
        config.mkdir(parents=True, exist_ok=True)
        # The shell command is left to the user: the editor is asked.
        (config / "config.toml").write_text('[permissions.rules]\nbash = "ask"\n')
        yield h


@pytest.mark.parametrize("kind", KINDS)
def test_an_editor_drives_a_harness_through_coder_es(
    kind: str,
    henv: HarnessEnv,
    ts_sdk: Path,  # noqa: F811 (the fixture of test_acp_ts_sdk)
) -> None:
    h = henv
    agent = [sys.executable, "-m", "coder_es.cli.main", "--workspace", str(h.workspace)]
    agent += ["acp", "--harness", kind, "--no-watch"]
    done = subprocess.run(
        ["node", str(TS_CLIENT / "harness_client.mjs"), str(h.workspace), *agent],
        env=h.env,
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.splitlines()[-1])

    assert {"tree", "rewind", "fork", "switch", "diff", "label", "search"} <= set(seen["commands"])
    assert seen["configOptions"] == ["mode"]  # the harness chooses its model
    assert seen["stopReason"] == "end_turn" and "FAKE-ANSWER-7Q" in seen["text"], done.stderr[
        -2000:
    ]
    assert len(seen["toolCalls"]) == 2, json.dumps(seen, indent=1)
    assert "pending" not in seen["finished"][-1:] and "completed" in seen["finished"]
    assert (h.workspace / "notes.md").read_text() == "# Notes\nwritten by the harness\n"
    if kind != "gemini":  # Gemini CLI's auto_edit (build without --yes) refuses commands itself
        assert (h.workspace / "made.txt").exists(), done.stderr[-3000:]
        assert (h.workspace / "made.txt").read_text() == "made\n"
    # /tree is a code block; /search finds the harness's answer in this session
    assert seen["tree"].startswith("```") and "tool" in seen["tree"]
    assert "FAKE-ANSWER-7Q" in seen["search"]
    assert seen["afterSetMode"][0] == "current_mode_update"
    assert seen["secondStop"] == "end_turn" and "FAKE-ANSWER-7Q" in seen["secondText"]

    # What our rules left to the user (the shell command, under build) was asked of the editor,
    # and recorded as the user's decision.
    exported = h.cli("export", seen["sessionId"], "--format", "jsonl")
    decided = [
        json.loads(line) for line in exported.stdout.splitlines() if '"PermissionDecided"' in line
    ]
    if kind == "claude":
        assert seen["asked"] == ["Run `echo made > made.txt`"], done.stderr[-3000:]
        assert any(d["fields"]["decided_by"] == "user" for d in decided), decided
