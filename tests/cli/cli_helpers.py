"""Running the ``coder-es`` command as a user would: in-process through ``main`` or as a process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from coder_es.cli.main import main

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    def json_lines(self) -> list[Any]:
        return [json.loads(line) for line in self.out.splitlines() if line.strip()]


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.email=t@t", "-c", "user.name=t", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout


def git_repo(path: Path, files: dict[str, str]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        target = path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    git(path, "init", "-q")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "init")
    return path


def script(path: Path, *turns: dict[str, Any]) -> str:
    path.write_text(json.dumps({"turns": list(turns)}))
    return str(path)


def tool(name: str, **input: Any) -> dict[str, Any]:
    return {"type": "tool_use", "name": name, "input": input}


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def turn(*blocks: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"blocks": list(blocks), **extra}


class Cli:
    """``coder-es --workspace REPO ...`` in this process, output captured."""

    def __init__(self, repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.repo = repo
        self.capsys = capsys

    def __call__(self, *args: str) -> Result:
        self.capsys.readouterr()
        code = main(["--workspace", str(self.repo), *args])
        captured = self.capsys.readouterr()
        return Result(code, captured.out, captured.err)

    def run_script(self, prompt: str, script_path: str, *extra: str) -> tuple[Result, str]:
        """One ``run`` turn; returns its result and the session id."""
        result = self("run", prompt, "--script", script_path, "--json", *extra)
        return result, result.json_lines()[0]["session_id"]


def subprocess_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def run_process(args: list[str], cwd: Path, **env: str) -> Result:
    done = subprocess.run(
        [sys.executable, "-m", "coder_es.cli.main", *args],
        cwd=cwd,
        env=subprocess_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    return Result(done.returncode, done.stdout, done.stderr)
