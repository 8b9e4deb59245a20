from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import Cli, git_repo

_PROVIDER_ENV = (
    "ANTHROPIC_API_KEY",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "CODER_ES_SCRIPT",
    "CODER_ES_PROVIDER",
    "CODER_ES_MODEL",
)


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A small git repository as the workspace; its store in tmp_path/store (SQLite: fast)."""
    for var in _PROVIDER_ENV:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CODER_ES_STORE", str(tmp_path / "store"))
    monkeypatch.setenv("CODER_ES_BACKEND", "sqlite")
    return git_repo(tmp_path / "repo", {"notes.md": "a\nb\nc\n", "src/app.py": "x = 1\n"})


@pytest.fixture
def cli(repo: Path, capsys: pytest.CaptureFixture[str]) -> Cli:
    return Cli(repo, capsys)
