"""``provider(name, model)``: a model provider built as the CLI builds it.

Keys and endpoints come from ``env`` (default: the process environment): ``ANTHROPIC_API_KEY``,
``OPENAI_API_KEY`` / ``OPENAI_BASE_URL``, ``OLLAMA_HOST``. ``ScriptedProvider`` plays a script
offline (tests, examples); a provider of your own subclasses ``Provider``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from coder_es.providers.base import Provider


def provider(name: str, model: str, *, env: Mapping[str, str] | None = None) -> Provider:
    """``anthropic``, ``openai``, ``openai-responses``, ``ollama`` or ``scripted`` (whose model
    is the script's path)."""
    from coder_es.providers.factory import build_provider

    return build_provider(name, model, env=os.environ if env is None else env)
