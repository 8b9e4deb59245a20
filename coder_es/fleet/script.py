"""The scripted provider for a fleet: the turn played is chosen by the session's step.

``ScriptedProvider`` plays its turns in request order, which suits one process running a session
from start to end. A fleet resumes sessions on other workers after a crash, with a fresh provider,
so the turn must follow from the conversation instead: the answer to a request with K assistant
messages is turn K. A resumed session then continues its script exactly where it stopped, and a
turn whose response was lost in a crash is simply asked for again.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from coder_es.providers.base import Provider, Sleep
from coder_es.providers.errors import ProviderConfigError, ScriptExhaustedError
from coder_es.providers.factory import SCRIPT_ENV, build_provider
from coder_es.providers.scripted import ScriptedProvider, ScriptedTurn, load_script
from coder_es.providers.types import ModelRequest, StreamEvent, StreamFailed

ProviderFactory = Callable[[str, str], Provider]


class StepScriptedProvider(Provider):
    name: ClassVar[str] = "scripted"

    def __init__(
        self,
        turns: Sequence[ScriptedTurn | Mapping[str, Any]],
        *,
        model: str = "scripted",
        source: str = "in-memory script",
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.model = model
        self.source = source
        self.sleep = sleep
        self.turns = ScriptedProvider(list(turns), source=source).turns

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        step = sum(1 for m in request.messages if m.get("role") == "assistant")
        if step >= len(self.turns):
            error = ScriptExhaustedError(
                f"{self.source} has {len(self.turns)} turn(s); the conversation already has "
                f"{step} model response(s), so this request has no scripted answer",
                provider=self.name,
            )
            yield StreamFailed(error)
            raise error
        turn = self.turns[step]
        # Tool call ids must be unique in a conversation; number them by step and block.
        blocks = [
            {**b, "id": b.get("id") or f"toolu_step{step}_{i}"} if b["type"] == "tool_use" else b
            for i, b in enumerate(turn.blocks)
        ]
        one = ScriptedProvider(
            [replace(turn, blocks=blocks)], model=self.model, source=self.source, sleep=self.sleep
        )
        async for event in one.stream(request):
            yield event


def fleet_provider_factory(env: Mapping[str, str] | None = None) -> ProviderFactory:
    """Providers for workers: scripted sessions get a ``StepScriptedProvider``."""
    environ = os.environ if env is None else env

    def factory(name: str, model: str) -> Provider:
        if name != "scripted":
            return build_provider(name, model, env=environ)
        candidate = model if model.endswith((".json", ".jsonl")) else environ.get(SCRIPT_ENV, "")
        if not candidate:
            raise ProviderConfigError(
                f"a scripted session needs its script: queue it with --model/--script PATH or "
                f"set {SCRIPT_ENV} for the worker",
                provider="scripted",
            )
        path = Path(candidate)
        return StepScriptedProvider(load_script(path), model=path.stem, source=str(path))

    return factory
