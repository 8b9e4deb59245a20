"""Anthropic Messages API (``POST /v1/messages``, ``stream: true``, SSE)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, ClassVar

import httpx

from coder_es.providers.base import HTTPProvider, RetryCallback, Sleep, error_from_payload
from coder_es.providers.errors import StreamProtocolError
from coder_es.providers.images import is_image, wire_anthropic
from coder_es.providers.retry import RetryPolicy
from coder_es.providers.sse import SSEDecoder, loads
from coder_es.providers.types import (
    STOP_REASONS,
    Block,
    BlockComplete,
    Finish,
    MessageStart,
    ModelRequest,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallComplete,
    ToolCallDelta,
    ToolCallStart,
    Usage,
    UsageUpdate,
    empty_usage,
    message_blocks,
)

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"

# Blocks that may carry a cache breakpoint. Thinking blocks may not; an empty text block may not.
_CACHEABLE = frozenset({"text", "tool_use", "tool_result", "image", "document", "search_result"})
_EPHEMERAL = {"type": "ephemeral"}

_USAGE_FIELDS = (
    ("input_tokens", "input_tokens"),
    ("output_tokens", "output_tokens"),
    ("cache_read_input_tokens", "cache_read_tokens"),
    ("cache_creation_input_tokens", "cache_write_tokens"),
)


def _merge_usage(usage: Usage, wire: Any) -> None:
    # message_delta usage is cumulative and may omit fields: only overwrite what is present.
    if not isinstance(wire, dict):
        return
    for src, dst in _USAGE_FIELDS:
        value = wire.get(src)
        if isinstance(value, int):
            usage[dst] = value


class AnthropicProvider(HTTPProvider):
    name: ClassVar[str] = "anthropic"
    request_id_header: ClassVar[str] = "request-id"

    def __init__(
        self,
        model: str,
        *,
        api_key: str,
        base_url: str = DEFAULT_BASE_URL,
        client: httpx.AsyncClient | None = None,
        retry: RetryPolicy | None = None,
        sleep: Sleep | None = None,
        on_retry: RetryCallback | None = None,
        beta: Sequence[str] = (),
        prompt_caching: bool = True,
    ) -> None:
        super().__init__(
            model, base_url=base_url, client=client, retry=retry, sleep=sleep, on_retry=on_retry
        )
        self.api_key = api_key
        self.beta = tuple(beta)
        self.prompt_caching = prompt_caching

    @property
    def url(self) -> str:
        base = self.base_url
        return f"{base}/messages" if base.endswith("/v1") else f"{base}/v1/messages"

    def headers(self) -> dict[str, str]:
        headers = {
            "x-api-key": self.api_key,
            "anthropic-version": API_VERSION,
            "accept": "text/event-stream",
        }
        if self.beta:
            headers["anthropic-beta"] = ",".join(self.beta)
        return headers

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        return build_anthropic_body(request, prompt_caching=self.prompt_caching)

    def new_parser(self, model: str, request_id: str | None) -> AnthropicParser:
        return AnthropicParser(model, request_id)


def build_anthropic_body(request: ModelRequest, *, prompt_caching: bool = True) -> dict[str, Any]:
    """The Messages API body. With ``prompt_caching``, breakpoints go on the stable prefix: the
    system prompt, the last tool and the last cacheable block of the last message (3 of the 4
    allowed), so each turn reads the previous turn's prefix from the cache."""
    messages: list[dict[str, Any]] = []
    for message in request.messages:
        blocks = [
            wire_anthropic(b) if is_image(b) else dict(b)
            for b in message_blocks(message)
            # A thinking block without a signature came from another provider: Anthropic would
            # reject it, and it cannot be verified anyway. An OpenAI Responses item is OpenAI's.
            if not (b["type"] == "thinking" and not b.get("signature"))
            and b["type"] != "openai_item"
        ]
        messages.append({"role": message["role"], "content": blocks})
    body: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "messages": messages,
        "stream": True,
    }
    if request.system:
        system: dict[str, Any] = {"type": "text", "text": request.system}
        if prompt_caching:
            system["cache_control"] = _EPHEMERAL
        body["system"] = [system]
    if request.tools:
        tools = [dict(t) for t in request.tools]
        if prompt_caching:
            tools[-1]["cache_control"] = _EPHEMERAL
        body["tools"] = tools
    if prompt_caching and messages:
        for block in reversed(messages[-1]["content"]):
            if block["type"] in _CACHEABLE and (block["type"] != "text" or block.get("text")):
                block["cache_control"] = _EPHEMERAL
                break
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.stop_sequences:
        body["stop_sequences"] = list(request.stop_sequences)
    user_id = request.metadata.get("user_id")
    if isinstance(user_id, str):
        body["metadata"] = {"user_id": user_id}
    body.update(request.extra_body)
    return body


class _Open:
    """A content block being received: its start, plus what each known delta type added.

    Every known delta extends one field whatever the block's type (``text_delta`` the text,
    ``input_json_delta`` the input...), so a block type added after this code was written that
    streams with known deltas still assembles to what the server sent.
    """

    __slots__ = (
        "block",
        "citations",
        "compaction",
        "encrypted",
        "json",
        "kind",
        "signature",
        "text",
        "thinking",
    )

    def __init__(self, kind: str, block: Block) -> None:
        self.kind = kind  # "text", "thinking", "tool", or "verbatim"
        self.block = block
        self.text: list[str] = []
        self.thinking: list[str] = []
        self.json: list[str] = []
        self.citations: list[Any] = []
        self.signature: str | None = None
        # A compaction block's summary and opaque metadata (``compaction_delta``), which must be
        # sent back verbatim: a block kept with ``content: null`` loses the compacted context.
        self.compaction: list[str] = []
        self.encrypted: list[str] = []

    def assembled(self) -> Block:
        """The finished block (the tool_use input is parsed by the caller)."""
        block = dict(self.block)
        if self.text or self.kind == "text":
            block["text"] = str(block.get("text") or "") + "".join(self.text)
        if self.thinking or self.kind == "thinking":
            block["thinking"] = str(block.get("thinking") or "") + "".join(self.thinking)
        if self.signature is not None or self.kind == "thinking":
            block["signature"] = str(block.get("signature") or "") + (self.signature or "")
        if self.compaction:
            block["content"] = str(block.get("content") or "") + "".join(self.compaction)
        if self.encrypted:
            block["encrypted_content"] = str(block.get("encrypted_content") or "") + "".join(
                self.encrypted
            )
        if self.citations:
            block["citations"] = [*(block.get("citations") or []), *self.citations]
        elif self.kind == "text" and not block.get("citations"):
            # ``"citations": []`` / ``null`` on a start means "none yet": nothing to send back.
            block.pop("citations", None)
        return block


class AnthropicParser:
    """Anthropic SSE events to normalized events."""

    def __init__(self, model: str, request_id: str | None) -> None:
        self._sse = SSEDecoder()
        self._model = model
        self._request_id = request_id
        self._open: dict[int, _Open] = {}
        self._usage = empty_usage()
        self._stop_reason: str | None = None
        self._stop_sequence: str | None = None
        self._started = False
        self._done = False

    def feed(self, chunk: bytes) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        for frame in self._sse.feed(chunk):
            if self._done:
                continue
            try:
                data = loads(frame.data)
            except ValueError as e:
                raise self._protocol(f"event {frame.event!r} carries invalid JSON: {e}") from None
            if type(data) is not dict:
                raise self._protocol(f"event {frame.event!r} is not a JSON object")
            kind = data.get("type") or frame.event
            # Text deltas are nearly every frame of a response: handle them without the dispatch.
            if kind == "content_block_delta":
                delta = data.get("delta")
                if type(delta) is dict and delta.get("type") == "text_delta":
                    state = self._open.get(data.get("index"))  # type: ignore[arg-type]
                    if state is not None:
                        text = delta.get("text", "")
                        state.text.append(text)
                        out.append(TextDelta(data["index"], text))
                        continue
            self._handle(kind, data, out)
        return out

    def close(self) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        frames, inside = self._sse.close_cut()
        cut = " (cut inside an event)" if inside else ""
        for frame in frames:
            if not self._done:
                try:
                    data = loads(frame.data)
                except ValueError:
                    raise self._protocol("the stream ended inside an event") from None
                self._handle(data.get("type") or frame.event, data, out)
        if not self._done:
            open_tools = [o.block.get("name") for o in self._open.values() if o.kind == "tool"]
            detail = f" with tool call(s) {open_tools} incomplete" if open_tools else ""
            raise self._protocol(f"the stream ended before message_stop{cut}{detail}")
        return out

    def _protocol(self, message: str) -> StreamProtocolError:
        return StreamProtocolError(message, provider="anthropic", request_id=self._request_id)

    def _handle(self, kind: str, data: dict[str, Any], out: list[StreamEvent]) -> None:
        if kind == "content_block_delta":
            self._delta(data, out)
        elif kind == "content_block_start":
            self._block_start(data, out)
        elif kind == "content_block_stop":
            self._block_stop(data, out)
        elif kind == "message_start":
            message = data.get("message") or {}
            _merge_usage(self._usage, message.get("usage"))
            self._model = message.get("model") or self._model
            self._started = True
            out.append(
                MessageStart(
                    model=self._model,
                    message_id=message.get("id"),
                    request_id=self._request_id,
                    usage=dict(self._usage),
                )
            )
        elif kind == "message_delta":
            delta = data.get("delta") or {}
            if "stop_reason" in delta:
                self._stop_reason = delta["stop_reason"]
                self._stop_sequence = delta.get("stop_sequence")
            _merge_usage(self._usage, data.get("usage"))
            out.append(UsageUpdate(dict(self._usage)))
        elif kind == "message_stop":
            if self._open:
                raise self._protocol(f"message_stop with blocks {sorted(self._open)} still open")
            raw = self._stop_reason
            out.append(
                Finish(
                    stop_reason=raw if raw in STOP_REASONS else "other",
                    usage=dict(self._usage),
                    raw_stop_reason=raw,
                    stop_sequence=self._stop_sequence,
                )
            )
            self._done = True
        elif kind == "error":
            raise error_from_payload("anthropic", data, self._request_id)
        # "ping" and event types added after this code was written are ignored, as documented.

    def _index(self, data: dict[str, Any]) -> int:
        index = data.get("index")
        if not isinstance(index, int):
            raise self._protocol(f"{data.get('type')} without an integer index")
        return index

    def _block_start(self, data: dict[str, Any], out: list[StreamEvent]) -> None:
        index = self._index(data)
        block = data.get("content_block")
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise self._protocol(f"content_block_start {index} without a content block")
        if index in self._open:
            raise self._protocol(f"content block {index} started twice")
        kind = block["type"]
        if kind == "text":
            state = _Open("text", block)
            if block.get("text"):
                out.append(TextDelta(index, block["text"]))
        elif kind == "thinking":
            state = _Open("thinking", block)
            if block.get("thinking"):
                out.append(ThinkingDelta(index, block["thinking"]))
        elif kind == "tool_use":
            state = _Open("tool", block)
            out.append(ToolCallStart(index, str(block.get("id", "")), str(block.get("name", ""))))
        else:
            # server_tool_use, web_search_tool_result, redacted_thinking, and whatever comes next:
            # kept exactly as received so it can be sent back.
            state = _Open("verbatim", dict(block))
        self._open[index] = state

    def _delta(self, data: dict[str, Any], out: list[StreamEvent]) -> None:
        index = self._index(data)
        state = self._open.get(index)
        if state is None:
            raise self._protocol(f"delta for content block {index}, which is not open")
        delta = data.get("delta") or {}
        kind = delta.get("type")
        if kind == "text_delta":
            text = delta.get("text", "")
            state.text.append(text)
            out.append(TextDelta(index, text))
        elif kind == "input_json_delta":
            partial = delta.get("partial_json", "")
            state.json.append(partial)
            if state.kind == "tool" and partial:
                out.append(ToolCallDelta(index, partial))
        elif kind == "thinking_delta":
            thinking = delta.get("thinking", "")
            state.thinking.append(thinking)
            out.append(ThinkingDelta(index, thinking))
        elif kind == "signature_delta":
            state.signature = (state.signature or "") + delta.get("signature", "")
            out.append(ThinkingDelta(index, "", delta.get("signature", "")))
        elif kind == "compaction_delta":
            if isinstance(delta.get("content"), str):
                state.compaction.append(delta["content"])
            if isinstance(delta.get("encrypted_content"), str):
                state.encrypted.append(delta["encrypted_content"])
        elif kind == "citations_delta":
            citation = delta.get("citation")
            if citation is not None:
                state.citations.append(citation)
        # Unknown delta types are ignored: the block still completes with what we understood.

    def _block_stop(self, data: dict[str, Any], out: list[StreamEvent]) -> None:
        index = self._index(data)
        state = self._open.pop(index, None)
        if state is None:
            raise self._protocol(f"content_block_stop for block {index}, which is not open")
        if state.kind == "tool":
            args = self._parse_input(index, state)
            out.append(
                ToolCallComplete(
                    index, str(state.block.get("id", "")), str(state.block.get("name", "")), args
                )
            )
            return
        block = state.assembled()
        if state.json:
            # A verbatim block that streamed its input (server_tool_use, mcp_tool_use).
            block["input"] = self._parse_input(index, state)
        out.append(BlockComplete(index, block))

    def _parse_input(self, index: int, state: _Open) -> dict[str, Any]:
        text = "".join(state.json)
        if not text.strip():
            initial = state.block.get("input")
            return dict(initial) if isinstance(initial, dict) else {}
        try:
            value = json.loads(text)
        except ValueError as e:
            raise self._protocol(
                f"tool call {state.block.get('name')!r} (block {index}) has invalid input JSON: {e}"
            ) from None
        if not isinstance(value, dict):
            raise self._protocol(f"tool call input for block {index} is not a JSON object")
        return value
