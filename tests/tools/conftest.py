"""A real git repository and real tool contexts on it."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from shell_helpers import RecordingSink, shell_settings

from coder_es.store.blobs import MemoryBlobStore
from coder_es.tools.base import ToolContext
from coder_es.workspace.workspace import Workspace


def git_repo(path: Path, files: dict[str, str]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        target = path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    subprocess.run(["git", "init", "-q"], cwd=path, check=True)
    subprocess.run(["git", "add", "-A"], cwd=path, check=True)
    subprocess.run(
        ["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init"],
        cwd=path,
        check=True,
    )
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return git_repo(
        tmp_path / "repo",
        {
            "README.md": "# Demo\nhello world\n",
            "src/app.py": "def main():\n    return 'hello'\n",
            "src/util.py": "HELLO = 1\n",
            ".gitignore": "build/\n*.log\n",
            "build/out.py": "hello = 'ignored'\n",
            "debug.log": "hello from the log\n",
        },
    )


@pytest.fixture(params=["sandbox", "fallback"])
def shell_mode(request: pytest.FixtureRequest) -> str:
    """Both ways shell commands run: in the namespace sandbox, and the stat-index fallback."""
    return str(request.param)


@pytest.fixture
def make_ctx(repo: Path, shell_mode: str) -> Callable[..., ToolContext]:
    sink = RecordingSink()
    ws = Workspace(repo, MemoryBlobStore(), sink)
    cache: dict[str, Any] = {}
    settings = shell_settings(shell_mode, ws.root)

    def make(tool_use_id: str = "t1", **kwargs: Any) -> ToolContext:
        kwargs.setdefault("sandbox", settings)
        return ToolContext(
            root=ws.root, tool_use_id=tool_use_id, sink=sink, workspace=ws, cache=cache, **kwargs
        )

    return make
