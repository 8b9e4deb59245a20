"""Model providers over raw httpx, behind one normalized stream-event type.

provider = build_provider("anthropic", "claude-sonnet-4-5")
response = await provider.complete(ModelRequest(model=..., messages=[...]))
# or, live: async for event in provider.stream(request): ...
"""

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
from coder_es.providers.pricing import Price, PriceTable
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
