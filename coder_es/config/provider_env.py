"""The environment a provider is built from, with the configuration laid over it.

``build_provider`` reads the documented variables (``ANTHROPIC_BASE_URL``, ``OPENAI_API_KEY``,
``OLLAMA_HOST``...). The configuration's ``[providers.NAME]`` ``base_url`` and ``api_key_env``
must act the same way, so they are written into those variables here: the configuration (which
already took the variables as one of its layers) decides, and one factory serves every caller.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from coder_es.config.values import Config

# The variables build_provider reads for each provider: (base URL, API key).
_VARIABLES = {
    "anthropic": ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY"),
    "openai": ("OPENAI_BASE_URL", "OPENAI_API_KEY"),
    "openai-responses": ("OPENAI_BASE_URL", "OPENAI_API_KEY"),
    "ollama": ("OLLAMA_HOST", ""),
}


def provider_environ(
    config: Config, name: str, environ: Mapping[str, str] = os.environ
) -> dict[str, str]:
    """``environ`` with the configured base URL and API key of provider ``name`` in the
    variables the provider factory reads for it."""
    out = dict(environ)
    provider = config.providers.get(name)
    if provider is None or name not in _VARIABLES:
        return out
    url_var, key_var = _VARIABLES[name]
    if provider.custom_base_url:
        out[url_var] = provider.base_url
    if key_var and provider.api_key:
        out[key_var] = provider.api_key
    return out
