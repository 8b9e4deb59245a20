"""Resume after Ctrl-C, as coder_es/data/scripts/README.md describes it."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from cli_helpers import REPO_ROOT, Cli, subprocess_env


def test_ctrl_c_then_run_session_continues_the_turn_with_the_new_script(
    repo: Path, cli: Cli
) -> None:
    shutil.copy(REPO_ROOT / "coder_es/data/scripts/slow_turn.json", repo / "slow_turn.json")
    (repo / "other.json").write_text(
        json.dumps({"turns": [{"blocks": [{"type": "text", "text": "picked up again"}]}]})
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "coder_es.cli.main", "run", "go", "--script", "slow_turn.json"],
        cwd=repo,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not (repo / "started.txt").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)  # the slow model turn has begun
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "cancelled" in err and "Traceback" not in err
    sid = cli("sessions", "--json").json_lines()[0]["id"]

    r = cli("run", "--session", sid[:8], "--script", str(repo / "other.json"))
    assert r.code == 0, r.err
    assert "picked up again" in r.out
    assert f"session {sid} resumed (build, scripted/other)" in r.err
    kinds = [e["kind"] for e in cli("show", sid, "--json").json_lines()]
    cancelled = kinds.index("TurnCancelled")
    # Another script is another "model" (its file name): recorded before the turn goes on.
    assert kinds[cancelled + 1 : cancelled + 4] == [
        "SettingsChanged",
        "TurnResumed",
        "ModelResponded",
    ]

    # Nothing left to continue: a second resume calls no model and says the turn is over.
    again = cli("run", "--session", sid[:8], "--script", str(repo / "other.json"))
    assert again.code == 0
    assert [e["kind"] for e in cli("show", sid, "--json").json_lines()] == kinds


def test_resuming_with_the_same_script_never_repeats_a_completed_call(repo: Path, cli: Cli) -> None:
    """Issue 30: Ctrl-C during the slow model call of ``slow_turn``, then ``run --session S
    --script slow_turn``: the completed ``echo started > started.txt`` does not run again, and
    the interrupted run says how to resume."""
    turns = json.loads((REPO_ROOT / "coder_es/data/scripts/slow_turn.json").read_text())
    turns["turns"][1]["delay_ms"] = 3000  # the same script, a shorter wait
    (repo / "slow_turn.json").write_text(json.dumps(turns))
    proc = subprocess.Popen(
        [sys.executable, "-m", "coder_es.cli.main", "run", "go", "--script", "slow_turn.json"],
        cwd=repo,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not (repo / "started.txt").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    sid = cli("sessions", "--json").json_lines()[0]["id"]
    assert f"resume: coder-es run --session {sid[:8]} --script slow_turn.json" in err

    r = cli("run", "--session", sid[:8], "--script", str(repo / "slow_turn.json"))
    assert r.code == 0, r.err
    events = cli("show", sid, "--json").json_lines()
    bash_calls = [e for e in events if e["kind"] == "ToolCallCompleted"]
    assert len(bash_calls) == 1, [e["kind"] for e in events]
    assert "This turn takes a minute" in r.out
