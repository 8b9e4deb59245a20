"""Providers for fleet workers: a scripted session plays its script by step.

A fleet resumes sessions on other workers after a crash, with a fresh provider, so the turn played
must follow from the conversation, not from the requests this process has seen
(``ScriptedProvider(by_step=True)``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from coder_es.providers.base import Provider
from coder_es.providers.errors import ProviderConfigError
from coder_es.providers.factory import SCRIPT_ENV, build_provider
from coder_es.providers.scripted import ScriptedProvider, load_script

ProviderFactory = Callable[[str, str], Provider]


def fleet_provider_factory(env: Mapping[str, str] | None = None) -> ProviderFactory:
    """Providers for workers: scripted sessions get a ``ScriptedProvider`` playing by step."""
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
        return ScriptedProvider(load_script(path), model=path.stem, source=str(path), by_step=True)

    return factory
