"""Build a provider by name from the environment, with errors that say what to set."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from coder_es.providers.anthropic import DEFAULT_BASE_URL as ANTHROPIC_URL
from coder_es.providers.anthropic import AnthropicProvider
from coder_es.providers.base import Provider
from coder_es.providers.errors import ProviderConfigError
from coder_es.providers.ollama import OllamaProvider, host_url
from coder_es.providers.openai import DEFAULT_BASE_URL as OPENAI_URL
from coder_es.providers.openai import OpenAIProvider
from coder_es.providers.openai_responses import OpenAIResponsesProvider
from coder_es.providers.scripted import ScriptedProvider

PROVIDERS = ("anthropic", "openai", "openai-responses", "ollama", "scripted")

# Where the scripted provider finds its script when the model name is not a path.
SCRIPT_ENV = "CODER_ES_SCRIPT"

OFFLINE_HINT = (
    "To run offline without any API key, use the scripted provider: "
    f"--provider scripted --model path/to/script.json (or set {SCRIPT_ENV}); "
    "see coder_es/providers/scripted.py for the script format."
)


def _check_url(name: str, value: str) -> str:
    try:
        url = httpx.URL(value)
    except httpx.InvalidURL as e:
        raise ProviderConfigError(f"{name}={value!r} is not a valid URL: {e}") from e
    if url.scheme not in ("http", "https") or not url.host:
        raise ProviderConfigError(f"{name}={value!r} must be an http(s) URL")
    return value


def build_provider(
    name: str,
    model: str,
    client: httpx.AsyncClient | None = None,
    env: Mapping[str, str] = os.environ,
    **options: Any,
) -> Provider:
    """A provider named ``name`` (one of ``PROVIDERS``) for ``model``.

    Settings come from ``env``: ``ANTHROPIC_API_KEY``/``ANTHROPIC_BASE_URL``,
    ``OPENAI_API_KEY``/``OPENAI_BASE_URL``, ``OLLAMA_HOST``, and ``CODER_ES_SCRIPT`` for the
    scripted provider (whose ``model`` may also be the script's path). ``options`` go to the
    provider's constructor (``retry``, ``sleep``, ``on_retry``...). Without ``client`` the
    provider makes and owns one; close it with ``await provider.aclose()``.
    """
    key = name.strip().lower()
    if key == "anthropic":
        api_key = env.get("ANTHROPIC_API_KEY", "").strip()
        if not api_key:
            raise ProviderConfigError(
                f"the anthropic provider needs ANTHROPIC_API_KEY (missing: ANTHROPIC_API_KEY; "
                f"optional: ANTHROPIC_BASE_URL, default {ANTHROPIC_URL}). {OFFLINE_HINT}",
                provider="anthropic",
            )
        base = _check_url("ANTHROPIC_BASE_URL", env.get("ANTHROPIC_BASE_URL") or ANTHROPIC_URL)
        return AnthropicProvider(model, api_key=api_key, base_url=base, client=client, **options)
    if key in ("openai", "openai-responses"):
        openai_key = env.get("OPENAI_API_KEY", "").strip() or None
        custom = env.get("OPENAI_BASE_URL", "").strip()
        base = _check_url("OPENAI_BASE_URL", custom or OPENAI_URL)
        official = httpx.URL(base).host == "api.openai.com"
        # Local compatible servers usually need no key; api.openai.com always does.
        if openai_key is None and official:
            raise ProviderConfigError(
                f"the {key} provider needs OPENAI_API_KEY (missing: OPENAI_API_KEY), or "
                "OPENAI_BASE_URL pointing at a compatible server that needs no key. "
                + OFFLINE_HINT,
                provider=key,
            )
        if key == "openai-responses":
            return OpenAIResponsesProvider(
                model, api_key=openai_key, base_url=base, client=client, **options
            )
        field = "max_completion_tokens" if official else "max_tokens"
        options.setdefault("max_tokens_field", field)
        return OpenAIProvider(model, api_key=openai_key, base_url=base, client=client, **options)
    if key == "ollama":
        base = host_url(env.get("OLLAMA_HOST"))
        return OllamaProvider(model, base_url=base, client=client, **options)
    if key == "scripted":
        candidate = model if model.endswith((".json", ".jsonl")) else env.get(SCRIPT_ENV, "")
        if not candidate:
            raise ProviderConfigError(
                f"the scripted provider needs a script: pass its path as the model "
                f"(--model turns.json) or set {SCRIPT_ENV} (missing: {SCRIPT_ENV}). "
                "See coder_es/providers/scripted.py for the format.",
                provider="scripted",
            )
        path = Path(candidate)
        scripted_model = path.stem if candidate == model else model
        return ScriptedProvider.from_file(path, model=scripted_model or "scripted", **options)
    raise ProviderConfigError(
        f"unknown provider {name!r}; choose one of {', '.join(PROVIDERS)}. {OFFLINE_HINT}"
    )
