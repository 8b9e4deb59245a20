"""The names configuration values are checked against: providers, models, tools, agents, actions.

Model names are listed here in full. The price table in ``coder_es.providers.pricing`` cannot serve
as the list: its keys are name prefixes (``claude-sonnet-4``), which the API would reject as
models; a test checks that every priced prefix covers a model listed here, so the two cannot
drift. A dated snapshot (``claude-sonnet-4-5-20250929``, ``gpt-4o-2024-08-06``) or ``-latest``
alias of a listed name is known too, and users add names with ``providers.<name>.models``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

PROVIDERS = ("anthropic", "openai", "openai-responses", "ollama", "scripted")
AGENTS = ("build", "plan", "explore")
ACTIONS = ("allow", "ask", "defer", "deny")
TOOLS = ("bash", "read", "write", "edit", "grep", "find")
ANY_TOOL = "*"

DEFAULT_PROVIDER = "anthropic"
DEFAULT_AGENT = "build"

DEFAULT_MODELS = {
    "anthropic": "claude-sonnet-4-5",
    "openai": "gpt-5",
    "openai-responses": "gpt-5",
    # Ollama serves whatever the user pulled, and a script is a file: no sensible default.
    "ollama": "",
    "scripted": "",
}

DEFAULT_BASE_URLS = {
    "anthropic": "https://api.anthropic.com",
    "openai": "https://api.openai.com/v1",
    "openai-responses": "https://api.openai.com/v1",
    "ollama": "http://127.0.0.1:11434",
    "scripted": "",
}

# The environment variable that holds each provider's API key ("" = no key needed).
DEFAULT_KEY_ENVS = {
    "anthropic": "ANTHROPIC_API_KEY",
    "openai": "OPENAI_API_KEY",
    "openai-responses": "OPENAI_API_KEY",
    "ollama": "",
    "scripted": "",
}

SCRIPT_ENV = "CODER_ES_SCRIPT"

_MODELS: dict[str, tuple[str, ...]] = {
    "anthropic": (
        "claude-opus-4-5",
        "claude-opus-4-5-20251101",
        "claude-opus-4-1",
        "claude-opus-4-1-20250805",
        "claude-opus-4-0",
        "claude-opus-4-20250514",
        "claude-sonnet-4-5",
        "claude-sonnet-4-5-20250929",
        "claude-sonnet-4-0",
        "claude-sonnet-4-20250514",
        "claude-haiku-4-5",
        "claude-haiku-4-5-20251001",
        "claude-3-7-sonnet-latest",
        "claude-3-7-sonnet-20250219",
        "claude-3-5-haiku-latest",
        "claude-3-5-haiku-20241022",
        "claude-3-haiku-20240307",
    ),
    "openai": (
        "gpt-5.1",
        "gpt-5",
        "gpt-5-mini",
        "gpt-5-nano",
        "gpt-4.1",
        "gpt-4.1-mini",
        "gpt-4.1-nano",
        "gpt-4o",
        "gpt-4o-mini",
        "o1",
        "o3",
        "o3-mini",
        "o4-mini",
    ),
}

# The Responses API serves the same models (newer ones there first).
_MODELS["openai-responses"] = _MODELS["openai"]

# Providers whose model names can be checked: Ollama runs whatever was pulled, and the scripted
# provider's "model" is a script path.
CHECKED_PROVIDERS = ("anthropic", "openai", "openai-responses")

_SNAPSHOT = re.compile(r"-(?:\d{8}|\d{4}-\d{2}-\d{2}|latest)$")


def known_models(provider: str, extra: Iterable[str] = ()) -> tuple[str, ...]:
    """Model names known for ``provider``: the list above and ``extra`` (the user's ``models``
    and price-table keys)."""
    return tuple(dict.fromkeys([*_MODELS.get(provider, ()), *extra]))


def is_known_model(model: str, known: Iterable[str]) -> bool:
    names = set(known)
    return model in names or _SNAPSHOT.sub("", model) in names


def provider_of_model(model: str) -> str | None:
    """The provider whose known models include ``model``, if any (to catch a model given for
    the wrong provider)."""
    for provider in CHECKED_PROVIDERS:
        if is_known_model(model, known_models(provider)):
            return provider
    return None
