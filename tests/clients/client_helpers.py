"""Shared setup: a workspace with a config and a script, the environment for subprocesses,
and the stored events of a session (read after the process that wrote them has ended)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

from coder_es.application import CoderApp
from coder_es.store.config import StoreConfig

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]


def run(coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
    return asyncio.run(asyncio.wait_for(coro, timeout))


def make_workspace(tmp_path: Path, config: str, turns: list[dict[str, Any]]) -> Path:
    ws = tmp_path / "ws"
    (ws / ".coder-es").mkdir(parents=True)
    (ws / ".coder-es" / "config.toml").write_text(config)
    (tmp_path / "script.json").write_text(json.dumps({"turns": turns}))
    return ws


def user_config_file(tmp_path: Path, text: str | None = None) -> Path:
    """The user config of the processes ``child_env`` starts (written when ``text`` is given).
    Hot-reload tests loosen rules there: a project config's allow rules need a trusted
    workspace."""
    path = tmp_path / "xdg" / "coder-es" / "config.toml"
    if text is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return path


def child_env(tmp_path: Path) -> dict[str, str]:
    """No user config, no API keys, no inherited coder-es settings."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CODER_ES_", "ANTHROPIC_", "OPENAI_", "OLLAMA_"))
    }
    env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
    env["PYTHONPATH"] = str(REPO)
    return env


def cli(ws: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "coder_es.cli.main", "--workspace", str(ws), *args]


def stored_events(ws: Path, session_id: str) -> list[Any]:
    app = CoderApp(StoreConfig(backend="lmdb", path=ws / ".coder-es"))
    try:
        return app.session_events(app.resolve_session(session_id))
    finally:
        app.close()


def kinds(events: list[Any]) -> list[str]:
    return [type(e).__name__ for e in events]


@asynccontextmanager
async def serve_process(
    ws: Path, tmp_path: Path, *args: str, extra_env: dict[str, str] | None = None
) -> AsyncIterator[tuple[str, asyncio.subprocess.Process]]:
    """``coder-es serve --port 0`` (a free port); yields its URL once it listens."""
    proc = await asyncio.create_subprocess_exec(
        *cli(ws, "serve", "--port", "0", "--script", str(tmp_path / "script.json"), *args),
        env={**child_env(tmp_path), **(extra_env or {})},
        cwd=str(REPO),
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stderr is not None
    url = None
    lines: list[str] = []
    while url is None:
        line = (await proc.stderr.readline()).decode()
        if not line:
            await proc.wait()
            raise AssertionError("serve exited: " + "".join(lines))
        lines.append(line)
        if found := re.search(r"ws://\S+", line):
            url = found.group(0)
    try:
        yield url, proc
    finally:
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()
