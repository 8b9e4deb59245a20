"""Shell transactions through the real `coder-es` command: the store survives commands aimed at
it, and kill -9 at any moment leaves the workspace untouched or complete, and resumable."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from agent_helpers import git_repo, text, tool, turn

from coder_es.sandbox import SandboxSettings, availability
from coder_es.sandbox.transaction import tx_root

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = git_repo(tmp_path / "repo", {"README.md": "# Demo\n"})
    found = availability(SandboxSettings(), root)
    if not found.active:
        pytest.skip(f"the namespace sandbox is unavailable here: {found.reason}")
    return root


def cli(repo: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "coder_es.cli.main", "--workspace", str(repo), *args]


def env() -> dict[str, str]:
    out = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    for var in ("CODER_ES_STORE", "CODER_ES_BACKEND", "CODER_ES_SANDBOX", "CODER_ES_SCRIPT"):
        out.pop(var, None)
    return out


def text_turn() -> dict[str, Any]:
    return turn(text("done"))


def script(path: Path, *turns: dict[str, Any]) -> str:
    path.write_text(json.dumps({"turns": list(turns)}))
    return str(path)


def run_cli(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cli(repo, *args), capture_output=True, text=True, env=env(), timeout=120, check=False
    )


def test_commands_aimed_at_the_store_leave_it_intact(repo: Path, tmp_path: Path) -> None:
    attack = (
        "rm -rf .coder-es; ls -A .coder-es; "
        'for f in $(find "$PWD" "$PWD/.." -name \'*.mdb\' 2>/dev/null); do echo junk > $f; done; '
        "echo junk > .coder-es/lmdb/data.mdb"
    )
    first = run_cli(
        repo,
        "run",
        "wreck it",
        "--yes",
        "--json",
        "--script",
        script(tmp_path / "a.json", turn(tool("bash", command=attack)), turn(text("done"))),
    )
    assert first.returncode == 0, first.stderr
    session = json.loads(first.stdout.splitlines()[0])["session_id"]
    verified = run_cli(repo, "verify", "--all")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    again = run_cli(
        repo,
        "run",
        "again",
        "--session",
        session,
        "--yes",
        "--script",
        script(
            tmp_path / "b.json", turn(tool("bash", command="echo ok > ok.txt")), turn(text("k"))
        ),
    )
    assert again.returncode == 0, again.stderr
    assert (repo / "ok.txt").read_text() == "ok\n"


def test_kill_9_during_commands_leaves_untouched_or_complete(repo: Path, tmp_path: Path) -> None:
    files = 150
    rng = random.Random(15)
    outcomes = set()
    for i in range(2):
        out = f"out{i}"
        command = f"mkdir {out}; for n in $(seq {files}); do echo $n > {out}/f$n; done"
        proc = subprocess.Popen(
            cli(
                repo,
                "run",
                "write them",
                "--yes",
                "--json",
                "--script",
                script(
                    tmp_path / f"s{i}.json", turn(tool("bash", command=command)), turn(text("."))
                ),
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env(),
        )
        assert proc.stdout is not None
        session = json.loads(proc.stdout.readline())["session_id"]
        time.sleep(rng.uniform(0.05, 1.2))
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        # The next start of the session finishes or drops what the killed process left.
        resumed = run_cli(
            repo,
            "run",
            "go on",
            "--session",
            session,
            "--yes",
            "--script",
            script(tmp_path / f"r{i}.json", turn(text("resumed"))),
        )
        assert resumed.returncode == 0, resumed.stderr
        # Untouched (no directory at all) or complete (every file): never a part.
        written = sorted(os.listdir(repo / out)) if (repo / out).exists() else None
        assert written is None or len(written) == files, (i, written)
        outcomes.add(0 if written is None else len(written))
        assert os.listdir(tx_root(repo)) == []
    assert outcomes  # which outcome a kill meets depends on the timing; both are allowed


def test_doctor_names_the_shell_mode_and_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from coder_es.cli.main import main

    root = git_repo(tmp_path / "plain", {"a.txt": "a\n"})
    monkeypatch.setenv("CODER_ES_BACKEND", "sqlite")
    expected = availability(SandboxSettings(), root)
    assert main(["--workspace", str(root), "doctor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["shell_sandbox"]
    assert report == {"mode": expected.mode, "why": expected.reason}
    monkeypatch.setenv("CODER_ES_SANDBOX", "off")
    assert main(["--workspace", str(root), "doctor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["shell_sandbox"]
    assert report["mode"] == "stat-index fallback" and "turned off" in report["why"]
