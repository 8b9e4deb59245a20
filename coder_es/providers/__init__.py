"""Model providers over raw httpx, behind one normalized stream-event type.

provider = build_provider("anthropic", "claude-sonnet-4-5")
response = await provider.complete(ModelRequest(model=..., messages=[...]))
# or, live: async for event in provider.stream(request): ...
"""

# The names are imported when first used (PEP 562): a command that only needs prices or types
# (``show``, ``tree``) must not pay for httpx and every provider at start-up.
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from coder_es.providers.anthropic import AnthropicProvider
    from coder_es.providers.base import (
        HTTPProvider,
        Provider,
        ResponseAssembler,
        assemble,
    )
    from coder_es.providers.errors import (
        AuthenticationError,
        ConflictError,
        ContextTooLongError,
        InvalidRequestError,
        NetworkError,
        NotFoundError,
        OverloadedError,
        PermissionDeniedError,
        ProviderConfigError,
        ProviderError,
        ProviderTimeoutError,
        RateLimitedError,
        ScriptExhaustedError,
        ServerError,
        StreamProtocolError,
    )
    from coder_es.providers.factory import PROVIDERS, build_provider
    from coder_es.providers.ollama import OllamaProvider
    from coder_es.providers.openai import OpenAIProvider
    from coder_es.providers.openai_responses import OpenAIResponsesProvider
    from coder_es.providers.price import Price
    from coder_es.providers.pricing import PriceTable
    from coder_es.providers.retry import RetryPolicy
    from coder_es.providers.scripted import ScriptedProvider, ScriptedTurn, load_script
    from coder_es.providers.types import (
        USAGE_KEYS,
        Block,
        BlockComplete,
        Finish,
        MessageStart,
        ModelRequest,
        ModelResponse,
        Retrying,
        StopReason,
        StreamEvent,
        StreamFailed,
        TextDelta,
        ThinkingDelta,
        ToolCallComplete,
        ToolCallDelta,
        ToolCallStart,
        Usage,
        UsageUpdate,
        canonical_request,
    )

_WHERE = {
    "AnthropicProvider": "coder_es.providers.anthropic",
    "HTTPProvider": "coder_es.providers.base",
    "Provider": "coder_es.providers.base",
    "ResponseAssembler": "coder_es.providers.base",
    "assemble": "coder_es.providers.base",
    "AuthenticationError": "coder_es.providers.errors",
    "ConflictError": "coder_es.providers.errors",
    "ContextTooLongError": "coder_es.providers.errors",
    "InvalidRequestError": "coder_es.providers.errors",
    "NetworkError": "coder_es.providers.errors",
    "NotFoundError": "coder_es.providers.errors",
    "OverloadedError": "coder_es.providers.errors",
    "PermissionDeniedError": "coder_es.providers.errors",
    "ProviderConfigError": "coder_es.providers.errors",
    "ProviderError": "coder_es.providers.errors",
    "ProviderTimeoutError": "coder_es.providers.errors",
    "RateLimitedError": "coder_es.providers.errors",
    "ScriptExhaustedError": "coder_es.providers.errors",
    "ServerError": "coder_es.providers.errors",
    "StreamProtocolError": "coder_es.providers.errors",
    "PROVIDERS": "coder_es.providers.factory",
    "build_provider": "coder_es.providers.factory",
    "OllamaProvider": "coder_es.providers.ollama",
    "OpenAIProvider": "coder_es.providers.openai",
    "OpenAIResponsesProvider": "coder_es.providers.openai_responses",
    "Price": "coder_es.providers.price",
    "PriceTable": "coder_es.providers.pricing",
    "RetryPolicy": "coder_es.providers.retry",
    "ScriptedProvider": "coder_es.providers.scripted",
    "ScriptedTurn": "coder_es.providers.scripted",
    "load_script": "coder_es.providers.scripted",
    "USAGE_KEYS": "coder_es.providers.types",
    "Block": "coder_es.providers.types",
    "BlockComplete": "coder_es.providers.types",
    "Finish": "coder_es.providers.types",
    "MessageStart": "coder_es.providers.types",
    "ModelRequest": "coder_es.providers.types",
    "ModelResponse": "coder_es.providers.types",
    "Retrying": "coder_es.providers.types",
    "StopReason": "coder_es.providers.types",
    "StreamEvent": "coder_es.providers.types",
    "StreamFailed": "coder_es.providers.types",
    "TextDelta": "coder_es.providers.types",
    "ThinkingDelta": "coder_es.providers.types",
    "ToolCallComplete": "coder_es.providers.types",
    "ToolCallDelta": "coder_es.providers.types",
    "ToolCallStart": "coder_es.providers.types",
    "Usage": "coder_es.providers.types",
    "UsageUpdate": "coder_es.providers.types",
    "canonical_request": "coder_es.providers.types",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "PROVIDERS",
    "USAGE_KEYS",
    "AnthropicProvider",
    "AuthenticationError",
    "Block",
    "BlockComplete",
    "ConflictError",
    "ContextTooLongError",
    "Finish",
    "HTTPProvider",
    "InvalidRequestError",
    "MessageStart",
    "ModelRequest",
    "ModelResponse",
    "NetworkError",
    "NotFoundError",
    "OllamaProvider",
    "OpenAIProvider",
    "OpenAIResponsesProvider",
    "OverloadedError",
    "PermissionDeniedError",
    "Price",
    "PriceTable",
    "Provider",
    "ProviderConfigError",
    "ProviderError",
    "ProviderTimeoutError",
    "RateLimitedError",
    "ResponseAssembler",
    "RetryPolicy",
    "Retrying",
    "ScriptExhaustedError",
    "ScriptedProvider",
    "ScriptedTurn",
    "ServerError",
    "StopReason",
    "StreamEvent",
    "StreamFailed",
    "StreamProtocolError",
    "TextDelta",
    "ThinkingDelta",
    "ToolCallComplete",
    "ToolCallDelta",
    "ToolCallStart",
    "Usage",
    "UsageUpdate",
    "assemble",
    "build_provider",
    "canonical_request",
    "load_script",
]
