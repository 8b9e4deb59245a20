"""Provider-agnostic values: the request, the normalized stream events and the assembled response.

Content blocks are plain JSON dicts because they are stored in events as they are:

- ``{"type": "text", "text": str}`` (may carry ``citations``)
- ``{"type": "thinking", "thinking": str, "signature": str}``
- ``{"type": "tool_use", "id": str, "name": str, "input": dict}``
- ``{"type": "tool_result", "tool_use_id": str, "content": str, "is_error": bool}``
- ``{"type": "image", "media_type": str, "blob": sha256, "size": int}`` in user messages (plus
  base64 ``data`` once attached for sending; see coder_es.providers.images)
- any other block (``server_tool_use``, ``web_search_tool_result``, ``redacted_thinking``, ...) is
  kept verbatim and sent back to the provider that produced it exactly as received.

Usage dicts always have the keys of ``USAGE_KEYS``. ``input_tokens`` counts only the input that
was neither read from nor written to the prompt cache (Anthropic's convention; the OpenAI adapter
subtracts cached tokens to match), so cost is a plain weighted sum.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from coder_es.providers.errors import InvalidRequestError, ProviderError

Block = dict[str, Any]
Message = dict[str, Any]
Usage = dict[str, int]

USAGE_KEYS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")

StopReason = Literal[
    "end_turn",
    "tool_use",
    "max_tokens",
    "stop_sequence",
    # The server paused a long turn (server tools); send the conversation back to continue it.
    "pause_turn",
    "refusal",
    "model_context_window_exceeded",
    # The provider gave a reason we do not know; the raw value is kept next to it.
    "other",
]
STOP_REASONS: frozenset[str] = frozenset(StopReason.__args__)  # type: ignore[attr-defined]


def empty_usage() -> Usage:
    return dict.fromkeys(USAGE_KEYS, 0)


@dataclass(frozen=True)
class ModelRequest:
    """One request to a model. Treat the lists and dicts inside as immutable.

    ``metadata`` is our own bookkeeping (session id, node id...); only ``metadata["user_id"]`` is
    forwarded to providers that accept an end-user id. ``extra_body`` is merged into the
    provider's JSON body last (e.g. Anthropic ``thinking`` or ``tool_choice``).
    """

    model: str
    messages: list[Message]
    system: str = ""
    tools: list[dict[str, Any]] = field(default_factory=list)
    max_tokens: int = 4096
    temperature: float | None = None
    stop_sequences: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    extra_body: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.model:
            raise InvalidRequestError("ModelRequest.model is empty")
        if self.max_tokens <= 0:
            raise InvalidRequestError(f"max_tokens must be positive, got {self.max_tokens}")
        for i, message in enumerate(self.messages):
            role = message.get("role")
            if role not in ("user", "assistant"):
                raise InvalidRequestError(
                    f"messages[{i}].role must be 'user' or 'assistant', got {role!r} "
                    "(the system prompt goes in ModelRequest.system)"
                )
            content = message.get("content")
            if isinstance(content, str):
                continue
            if not isinstance(content, list) or not all(
                isinstance(b, dict) and isinstance(b.get("type"), str) for b in content
            ):
                raise InvalidRequestError(
                    f"messages[{i}].content must be a string or a list of blocks with a 'type'"
                )
        for i, tool in enumerate(self.tools):
            if not isinstance(tool.get("name"), str) or not isinstance(
                tool.get("input_schema", {}), dict
            ):
                raise InvalidRequestError(f"tools[{i}] needs a 'name' and a dict 'input_schema'")


def message_blocks(message: Message) -> list[Block]:
    """The content of a message as a list of blocks (a bare string is one text block)."""
    content = message["content"]
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return list(content)


def _strip_transport_keys(value: Any) -> Any:
    # cache_control is chosen by the adapter per request; it must not make equal requests differ.
    if isinstance(value, dict):
        return {k: _strip_transport_keys(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list | tuple):
        return [_strip_transport_keys(v) for v in value]
    return value


def _without_image_data(block: Block) -> Block:
    # An image's base64 bytes are attached just before sending (coder_es.providers.images); its
    # blob digest already names them.
    if block.get("type") == "image" and "blob" in block:
        return {k: v for k, v in block.items() if k != "data"}
    return block


def canonical_message(message: Message) -> dict[str, Any]:
    """One message as ``canonical_request`` holds it."""
    blocks = [_without_image_data(b) for b in message_blocks(message)]
    return {"role": message["role"], "content": _strip_transport_keys(blocks)}


def canonical_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """One tool definition as ``canonical_request`` holds it."""
    result: dict[str, Any] = _strip_transport_keys(
        {
            "name": tool["name"],
            "description": tool.get("description", ""),
            "input_schema": tool.get("input_schema", {}),
            **{k: v for k, v in tool.items() if k not in ("name", "description", "input_schema")},
        }
    )
    return result


def canonical_request(request: ModelRequest) -> dict[str, Any]:
    """A JSON-able form of everything in ``request`` that can change what the model says.

    Two requests the model would see identically have equal canonical forms: string content
    becomes a text block, ``cache_control`` markers are dropped, and ``metadata`` (bookkeeping)
    is left out. Replay compares these to detect a divergent request.
    """
    raw = {
        "model": request.model,
        "system": request.system,
        "messages": [canonical_message(m) for m in request.messages],
        "tools": [canonical_tool(t) for t in request.tools],
        "max_tokens": request.max_tokens,
        "temperature": request.temperature,
        "stop_sequences": list(request.stop_sequences),
        "extra_body": request.extra_body,
    }
    try:
        text = json.dumps(_strip_transport_keys(raw), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise InvalidRequestError(f"request is not JSON-serialisable: {e}") from e
    result: dict[str, Any] = json.loads(text)
    return result


# --- Stream events -------------------------------------------------------------------------------
# One event type: the union ``StreamEvent`` of the frozen classes below. ``index`` is the position
# of the block in the assembled response, the same for every provider.


@dataclass(frozen=True)
class _Event:
    type: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form, for recording the event."""
        out: dict[str, Any] = {"type": self.type}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            out[name] = str(value) if isinstance(value, BaseException) else value
        return out


@dataclass(frozen=True)
class MessageStart(_Event):
    type: ClassVar[str] = "message_start"
    model: str
    message_id: str | None = None
    request_id: str | None = None
    usage: Usage = field(default_factory=empty_usage)


@dataclass(frozen=True)
class TextDelta(_Event):
    type: ClassVar[str] = "text_delta"
    index: int
    text: str


@dataclass(frozen=True)
class ThinkingDelta(_Event):
    """Reasoning text, or (with ``thinking == ""``) the signature that closes a thinking block."""

    type: ClassVar[str] = "thinking_delta"
    index: int
    thinking: str
    signature: str | None = None


@dataclass(frozen=True)
class ToolCallStart(_Event):
    type: ClassVar[str] = "tool_call_start"
    index: int
    id: str
    name: str


@dataclass(frozen=True)
class ToolCallDelta(_Event):
    """A fragment of the tool input's JSON text: for live display only, never parsed alone."""

    type: ClassVar[str] = "tool_call_delta"
    index: int
    partial_json: str


@dataclass(frozen=True)
class ToolCallComplete(_Event):
    """A whole tool call with parsed input: only emitted once its JSON fully arrived and parsed."""

    type: ClassVar[str] = "tool_call_complete"
    index: int
    id: str
    name: str
    input: dict[str, Any]

    @property
    def block(self) -> Block:
        return {"type": "tool_use", "id": self.id, "name": self.name, "input": self.input}


@dataclass(frozen=True)
class BlockComplete(_Event):
    """Any other finished block (text, thinking, or one kept verbatim), exactly as it is stored."""

    type: ClassVar[str] = "block_complete"
    index: int
    block: Block


@dataclass(frozen=True)
class UsageUpdate(_Event):
    """Cumulative usage so far (it replaces, never adds to, the previous figures)."""

    type: ClassVar[str] = "usage"
    usage: Usage


@dataclass(frozen=True)
class Finish(_Event):
    type: ClassVar[str] = "finish"
    stop_reason: str
    usage: Usage
    raw_stop_reason: str | None = None
    stop_sequence: str | None = None


@dataclass(frozen=True)
class Retrying(_Event):
    """The attempt failed before any content; the provider waits ``delay_s`` and tries again.

    Anything received since the last ``MessageStart`` belongs to the failed attempt.
    """

    type: ClassVar[str] = "retrying"
    attempt: int
    max_attempts: int
    delay_s: float
    error: ProviderError


@dataclass(frozen=True)
class StreamFailed(_Event):
    """The last event of a failed stream; the provider raises ``error`` right after it."""

    type: ClassVar[str] = "error"
    error: ProviderError


StreamEvent = (
    MessageStart
    | TextDelta
    | ThinkingDelta
    | ToolCallStart
    | ToolCallDelta
    | ToolCallComplete
    | BlockComplete
    | UsageUpdate
    | Finish
    | Retrying
    | StreamFailed
)


@dataclass(frozen=True)
class ModelResponse:
    """One assembled model turn."""

    content: list[Block]
    stop_reason: str
    usage: Usage
    model: str = ""
    request_id: str | None = None
    message_id: str | None = None
    raw_stop_reason: str | None = None
    stop_sequence: str | None = None

    @property
    def tool_calls(self) -> list[Block]:
        return [b for b in self.content if b.get("type") == "tool_use"]

    @property
    def text(self) -> str:
        return "".join(b["text"] for b in self.content if b.get("type") == "text")

    def to_message(self) -> Message:
        """The assistant message to append to the conversation for the next request."""
        return {"role": "assistant", "content": list(self.content)}


def usage_from(mapping: Mapping[str, Any]) -> Usage:
    """A usage dict with all ``USAGE_KEYS``, from any mapping that has some of them."""
    usage = empty_usage()
    for key in USAGE_KEYS:
        value = mapping.get(key)
        if isinstance(value, int):
            usage[key] = value
    return usage
