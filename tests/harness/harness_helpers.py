"""The real agent CLIs (pinned in .ci/harness-clis, installed with npm ci when missing) and a
fresh HOME for each, pointed at the fake model server of ``fake_model``. (A module of its own,
not conftest.py: every test directory has a ``conftest`` module.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_model import FakeModel, Script

REPO = Path(__file__).resolve().parents[2]
CLIS = REPO / ".ci" / "harness-clis"
BIN = CLIS / "node_modules" / ".bin"
PROGRAMS = {"claude": "claude", "codex": "codex", "gemini": "gemini"}


def install_harness_clis() -> Path:
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are needed for the harness CLIs (apt install nodejs npm)")
    if not all((BIN / p).exists() for p in PROGRAMS.values()):
        try:
            done = subprocess.run(
                ["npm", "ci", "--loglevel=error", "--no-audit", "--no-fund", "--prefix", str(CLIS)],
                capture_output=True,
                text=True,
                timeout=600,
            )
        except subprocess.TimeoutExpired:
            pytest.skip("npm ci of the harness CLIs took more than 600 s")
        if done.returncode != 0:
            said = " ".join((done.stderr + done.stdout).split())[:300]
            pytest.skip(f"npm ci of the harness CLIs failed: {said}")
    return BIN


def sandbox_reason(workspace: Path) -> str | None:
    from coder_es.sandbox import SandboxSettings, availability

    found = availability(SandboxSettings(mode="auto"), workspace)
    return None if found.active else found.reason


@dataclass
class HarnessEnv:
    """A workspace, a fresh HOME for the CLIs and the environment that points them at ``model``."""

    workspace: Path
    home: Path
    env: dict[str, str]
    model: FakeModel

    def cli(self, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "coder_es.cli.main", "--workspace", str(self.workspace), *args],
            cwd=self.workspace,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def json_lines(self, out: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def make_env(tmp_path: Path, bin_dir: Path, script: Script) -> Iterator[HarnessEnv]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    home = tmp_path / "home"
    (home / ".gemini").mkdir(parents=True)
    # Gemini CLI: without a selected auth type, "Invalid auth method selected" (exit 41).
    (home / ".gemini" / "settings.json").write_text(
        json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}})
    )
    (home / ".codex").mkdir()
    # A model Codex knows the tools of (the newest default sends only a code-mode tool).
    (home / ".codex" / "config.toml").write_text('model = "gpt-5"\n')
    model = FakeModel(script).start()
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "PYTHONPATH": str(REPO),
        "CODEX_HOME": str(home / ".codex"),
        "ANTHROPIC_BASE_URL": model.url,
        "ANTHROPIC_API_KEY": "sk-ant-fake-key-for-tests",
        "OPENAI_BASE_URL": f"{model.url}/v1",
        "OPENAI_API_KEY": "sk-fake-key-for-tests",
        "GOOGLE_GEMINI_BASE_URL": model.url,
        "GEMINI_API_KEY": "fake-gemini-key",
    }
    for name in ("CODER_ES_STORE", "CODER_ES_BACKEND", "CODER_ES_PROVIDER"):
        env.pop(name, None)
    try:
        yield HarnessEnv(workspace, home, env, model)
    finally:
        model.stop()
