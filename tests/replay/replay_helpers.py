"""Shared by the replay tests: the bundled cassettes, and small scripted sessions."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SESSIONS = REPO / "coder_es" / "data" / "sessions"
DATA = Path(__file__).resolve().parent / "data"
sys.path.insert(0, str(SESSIONS))

from coder_es.application import CoderApp  # noqa: E402
from coder_es.providers.scripted import ScriptedProvider  # noqa: E402
from coder_es.service.api import AgentService, SessionOptions  # noqa: E402
from coder_es.store.config import StoreConfig  # noqa: E402
from replay.cassette import Cassette, load_cassette  # noqa: E402

NAMES = [
    "fix-failing-test",
    "refactor-across-files",
    "user-edit-merged",
    "denied-permission",
    "branched-rewind",
]


def bundled(name: str) -> Cassette:
    return load_cassette(SESSIONS / f"{name}.cassette.jsonl")


def tool(name: str, **input: Any) -> dict[str, Any]:
    return {"type": "tool_use", "name": name, "input": input}


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def record_session(
    root: Path,
    files: dict[str, str],
    turns: Sequence[Any],
    message: str,
    store: StoreConfig | None = None,
) -> tuple[CoderApp, str]:
    """Run one scripted turn on a fresh workspace (in an in-memory store by default)."""
    for rel, content in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(content)
    app = CoderApp(store)
    provider = ScriptedProvider([{"blocks": list(t)} if isinstance(t, list) else t for t in turns])
    service = AgentService(app, root, provider_factory=lambda _n, _m: provider)

    async def go() -> str:
        handle = await service.create_session(SessionOptions())
        async for _update in handle.send(message):
            pass
        await handle.close()
        return handle.id

    return app, asyncio.run(go())
