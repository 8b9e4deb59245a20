"""A session parked on a scheduled call, made in this process with an injected clock (issue 34,
point 4): the tests then open it in ``coder-es serve`` / ``acp``, whose clock is the system's.
Parked by a clock in 2020, the call's time has come for them; parked by one in 2040, it has not."""

from __future__ import annotations

import asyncio
from datetime import datetime
from pathlib import Path
from typing import Any

from coder_es.application import CoderApp
from coder_es.fleet.script import fleet_provider_factory
from coder_es.permissions.rules import parse_rule
from coder_es.service.api import AgentService, SessionOptions
from coder_es.store.config import StoreConfig

RULE = parse_rule("bash:touch night*@22:00-06:00", "schedule")
TURNS: list[dict[str, Any]] = [
    {
        "blocks": [
            {"type": "text", "text": "Tonight."},
            {"type": "tool_use", "name": "bash", "input": {"command": "touch night.txt"}},
        ]
    },
    {"blocks": [{"type": "text", "text": "It ran."}]},
    {"blocks": [{"type": "text", "text": "Next, then."}]},
]


class SetClock:
    def __init__(self, now: datetime) -> None:
        self.at = now

    def monotonic(self) -> float:
        return 0.0

    def now(self) -> datetime:
        return self.at

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(0)


async def park_scheduled(ws: Path, script: Path, at: datetime) -> str:
    """A session whose turn parked on ``touch night.txt`` at ``at`` (its window: 22:00 UTC)."""
    app = CoderApp(StoreConfig(backend="lmdb", path=ws / ".coder-es"))
    try:
        service = AgentService(
            app, ws, provider_factory=fleet_provider_factory(), clock=SetClock(at)
        )
        options = SessionOptions(provider="scripted", model=str(script), rules=(RULE,))
        handle = await service.create_session(options)
        try:
            async for _u in handle.send("run it tonight"):
                pass
            outcome = handle.outcome
            assert outcome is not None and outcome.reason == "waiting", outcome
        finally:
            await handle.close()
        return handle.id
    finally:
        app.close()
