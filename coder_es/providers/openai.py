"""OpenAI-compatible Chat Completions (``POST /chat/completions``, SSE ending in ``[DONE]``).

Works with api.openai.com and compatible servers (vLLM, llama.cpp, LM Studio, OpenRouter...).
Reasoning text sent by such servers as ``delta.reasoning_content`` or ``delta.reasoning`` becomes
thinking deltas (unsigned, so the Anthropic adapter never sends it back). A refusal arrives in
``delta.refusal`` instead of ``delta.content``: it is the answer the user must see, so it becomes
text too (as the Responses provider does with its refusal parts), and the turn ends as ``refusal``.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

import httpx

from coder_es.providers.accumulate import DeltaBlocks
from coder_es.providers.base import (
    HTTPProvider,
    RetryCallback,
    Sleep,
    WireParser,
    error_from_payload,
)
from coder_es.providers.errors import StreamProtocolError
from coder_es.providers.images import is_image, wire_openai_chat
from coder_es.providers.retry import RetryPolicy
from coder_es.providers.sse import SSEDecoder, loads
from coder_es.providers.types import (
    BlockComplete,
    Finish,
    MessageStart,
    ModelRequest,
    StreamEvent,
    ToolCallComplete,
    ToolCallDelta,
    ToolCallStart,
    Usage,
    UsageUpdate,
    empty_usage,
    message_blocks,
)

DEFAULT_BASE_URL = "https://api.openai.com/v1"

FINISH_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}


class OpenAIProvider(HTTPProvider):
    name: ClassVar[str] = "openai"
    request_id_header: ClassVar[str] = "x-request-id"

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None,
        base_url: str = DEFAULT_BASE_URL,
        client: httpx.AsyncClient | None = None,
        retry: RetryPolicy | None = None,
        sleep: Sleep | None = None,
        on_retry: RetryCallback | None = None,
        max_tokens_field: str = "max_tokens",
    ) -> None:
        super().__init__(
            model, base_url=base_url, client=client, retry=retry, sleep=sleep, on_retry=on_retry
        )
        self.api_key = api_key
        # api.openai.com's newer models refuse "max_tokens"; many compatible servers only know it.
        self.max_tokens_field = max_tokens_field

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

    def headers(self) -> dict[str, str]:
        headers = {"accept": "text/event-stream"}
        if self.api_key:
            headers["authorization"] = f"Bearer {self.api_key}"
        return headers

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        return build_openai_body(request, max_tokens_field=self.max_tokens_field)

    def new_parser(self, model: str, request_id: str | None) -> WireParser:
        return OpenAIParser(model, request_id)


def function_tools(request: ModelRequest) -> list[dict[str, Any]]:
    """Our tools in the ``{"type": "function"}`` shape (provider-side tools are skipped)."""
    return [
        {
            "type": "function",
            "function": {
                "name": t["name"],
                "description": t.get("description", ""),
                "parameters": t.get("input_schema") or {"type": "object", "properties": {}},
            },
        }
        for t in request.tools
        if "input_schema" in t
    ]


def build_openai_body(
    request: ModelRequest, *, max_tokens_field: str = "max_tokens"
) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    for message in request.messages:
        blocks = message_blocks(message)
        if message["role"] == "user":
            # Tool results are separate "tool" messages and must directly follow the assistant
            # message that made the calls, so they go before the user's own text.
            for b in blocks:
                if b["type"] == "tool_result":
                    content = _result_text(b)
                    messages.append(
                        {"role": "tool", "tool_call_id": b["tool_use_id"], "content": content}
                    )
            text = "".join(b["text"] for b in blocks if b["type"] == "text")
            images = [wire_openai_chat(b) for b in blocks if is_image(b)]
            if images:
                parts = [{"type": "text", "text": text}] if text else []
                messages.append({"role": "user", "content": [*parts, *images]})
            elif text:
                messages.append({"role": "user", "content": text})
        else:
            text = "".join(b["text"] for b in blocks if b["type"] == "text")
            calls = [
                {
                    "id": b["id"],
                    "type": "function",
                    "function": {"name": b["name"], "arguments": json.dumps(b["input"])},
                }
                for b in blocks
                if b["type"] == "tool_use"
            ]
            out: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                out["tool_calls"] = calls
            if text or calls:
                messages.append(out)
    body: dict[str, Any] = {
        "model": request.model,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
        max_tokens_field: request.max_tokens,
    }
    tools = function_tools(request)
    if tools:
        body["tools"] = tools
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.stop_sequences:
        body["stop"] = list(request.stop_sequences)
    user_id = request.metadata.get("user_id")
    if isinstance(user_id, str):
        body["user"] = user_id
    body.update(request.extra_body)
    return body


def _result_text(block: dict[str, Any]) -> str:
    content = block.get("content", "")
    if not isinstance(content, str):
        # Anthropic-style list of text blocks.
        content = "".join(
            c.get("text", "") for c in content if isinstance(c, dict) and c.get("type") == "text"
        )
    # Chat Completions has no is_error flag: say it in the text so the model knows.
    return f"[error] {content}" if block.get("is_error") else content


class _Call:
    __slots__ = ("args", "id", "index", "name", "started")

    def __init__(self, index: int) -> None:
        self.index = index
        self.id = ""
        self.name = ""
        self.args: list[str] = []
        self.started = False


class OpenAIParser:
    def __init__(self, model: str, request_id: str | None) -> None:
        self._sse = SSEDecoder()
        self._model = model
        self._request_id = request_id
        self._blocks = DeltaBlocks()
        self._calls: dict[Any, _Call] = {}
        self._usage: Usage = empty_usage()
        self._finish: str | None = None
        self._started = False
        self._refused = False
        self._done = False

    def _protocol(self, message: str) -> StreamProtocolError:
        return StreamProtocolError(message, provider="openai", request_id=self._request_id)

    def feed(self, chunk: bytes) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        for frame in self._sse.feed(chunk):
            if not self._done:
                self._frame(frame.data, out)
        return out

    def close(self) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        frames, inside = self._sse.close_cut()
        cut = " (cut inside a chunk)" if inside else ""
        for frame in frames:
            if not self._done:
                self._frame(frame.data, out)
        if not self._done:
            if self._finish is None or cut:
                pending = [c.name for c in self._calls.values()]
                detail = f" with tool call(s) {pending} incomplete" if pending else ""
                missing = "[DONE]" if self._finish else "a finish_reason"
                raise self._protocol(f"the stream ended before {missing}{cut}{detail}")
            # Some compatible servers close after the finish chunk without "data: [DONE]".
            self._end(out)
        return out

    def _frame(self, data: bytes, out: list[StreamEvent]) -> None:
        if data == b"[DONE]":
            if self._finish is None:
                raise self._protocol("[DONE] before any finish_reason")
            self._end(out)
            return
        try:
            chunk = loads(data)
        except ValueError as e:
            raise self._protocol(f"chunk is not valid JSON: {e}: {data[:120]!r}") from None
        if not isinstance(chunk, dict):
            raise self._protocol("chunk is not a JSON object")
        if "error" in chunk:
            raise error_from_payload("openai", chunk, self._request_id)
        if not self._started:
            self._started = True
            self._model = chunk.get("model") or self._model
            out.append(
                MessageStart(
                    model=self._model, message_id=chunk.get("id"), request_id=self._request_id
                )
            )
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            text = delta.get("content")
            if text:
                self._blocks.text(text, out)
            refusal = delta.get("refusal")
            if refusal and isinstance(refusal, str):
                self._refused = True
                self._blocks.text(refusal, out)
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if reasoning and isinstance(reasoning, str):
                self._blocks.thinking(reasoning, out)
            for fragment in delta.get("tool_calls") or ():
                self._tool_fragment(fragment, out)
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage = _usage(usage)
            out.append(UsageUpdate(dict(self._usage)))

    def _tool_fragment(self, fragment: dict[str, Any], out: list[StreamEvent]) -> None:
        wire_index: Any = fragment.get("index", 0)
        call = self._calls.get(wire_index)
        new_id = fragment.get("id")
        if call is not None and new_id and call.id and new_id != call.id:
            # Some servers omit "index" and send each call whole under its own id.
            wire_index = ("id", new_id)
            call = self._calls.get(wire_index)
        if call is None:
            call = self._calls[wire_index] = _Call(self._blocks.new_index())
        if fragment.get("id"):
            call.id = fragment["id"]
        function = fragment.get("function") or {}
        if function.get("name") and not call.started:
            call.name = function["name"]
        if not call.started and call.name:
            call.started = True
            out.append(ToolCallStart(call.index, call.id, call.name))
        arguments = function.get("arguments")
        if arguments:
            call.args.append(arguments)
            out.append(ToolCallDelta(call.index, arguments))

    def _end(self, out: list[StreamEvent]) -> None:
        blocks: list[BlockComplete | ToolCallComplete] = []
        blocks.extend(self._blocks.complete())
        for call in self._calls.values():
            if not call.name:
                raise self._protocol(f"tool call {call.id or call.index} never received a name")
            text = "".join(call.args)
            try:
                args = json.loads(text) if text.strip() else {}
            except ValueError as e:
                raise self._protocol(
                    f"tool call {call.name!r} has invalid arguments JSON: {e}"
                ) from None
            if not isinstance(args, dict):
                raise self._protocol(f"tool call {call.name!r} arguments are not a JSON object")
            blocks.append(ToolCallComplete(call.index, call.id, call.name, args))
        blocks.sort(key=lambda e: e.index)
        out.extend(blocks)
        raw = self._finish
        stop = FINISH_REASONS.get(raw or "", "other")
        if stop == "end_turn" and self._calls:
            stop = "tool_use"  # some servers report "stop" for tool calls
        elif stop == "end_turn" and self._refused:
            stop = "refusal"  # the model declined: "stop" on the wire, the answer in delta.refusal
        out.append(Finish(stop_reason=stop, usage=dict(self._usage), raw_stop_reason=raw))
        self._done = True


def _usage(wire: dict[str, Any]) -> Usage:
    usage = empty_usage()
    prompt = wire.get("prompt_tokens") or 0
    details = wire.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens") or 0 if isinstance(details, dict) else 0
    usage["input_tokens"] = max(prompt - cached, 0)
    usage["cache_read_tokens"] = cached
    usage["output_tokens"] = wire.get("completion_tokens") or 0
    return usage
