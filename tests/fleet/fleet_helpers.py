"""Scratch workspaces, scripts and a session factory for the fleet tests."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from coder_es.application import CoderApp
from coder_es.fleet.jobs import SessionJob
from coder_es.fleet.script import fleet_provider_factory
from coder_es.service.api import AgentService, SessionOptions
from coder_es.store.config import StoreConfig


def write_script(path: Path, steps: int, *, delay_ms: int = 0, final_delay_ms: int = 0) -> Path:
    """``steps`` turns that each append a line to trail.txt with bash, then a closing text."""
    turns: list[dict[str, Any]] = [
        {
            "blocks": [
                {"type": "text", "text": f"step {i}"},
                {
                    "type": "tool_use",
                    "name": "bash",
                    "input": {"command": f"echo step-{i} >> trail.txt"},
                },
            ],
            "delay_ms": delay_ms,
        }
        for i in range(steps)
    ]
    turns.append({"blocks": [{"type": "text", "text": "all done"}], "delay_ms": final_delay_ms})
    path.write_text(json.dumps({"turns": turns}))
    return path


def workspace(root: Path, name: str) -> Path:
    ws = root / name
    ws.mkdir(parents=True)
    (ws / "README.md").write_text(f"# {name}\n")
    return ws


async def create_sessions(
    config: StoreConfig, workspaces: list[Path], script: Path, prompt: str = "go"
) -> list[SessionJob]:
    """Sessions created as ``coder-es enqueue`` does, and the jobs that would run them."""
    app = CoderApp(config, env={"POSTGRES_POOL_SIZE": "1"})
    jobs: list[SessionJob] = []
    try:
        for ws in workspaces:
            service = AgentService(app, ws, provider_factory=fleet_provider_factory())
            options = SessionOptions(provider="scripted", model=str(script), title=ws.name)
            handle = await service.create_session(options)
            await handle.close()
            jobs.append(
                SessionJob(
                    session_id=handle.id,
                    prompt=f"{prompt} ({ws.name})",
                    yes=True,
                    provider="scripted",
                    model=str(script),
                )
            )
    finally:
        app.close()
    return jobs


async def enqueue(config: StoreConfig, jobs: list[SessionJob]) -> list[int]:
    from coder_es.fleet.queue import FleetQueue  # procrastinate: only the queue tests need it

    async with FleetQueue(config) as queue:
        return await queue.enqueue_many(jobs)


def run(coro: Any) -> Any:
    return asyncio.run(coro)
