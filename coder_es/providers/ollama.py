"""Ollama's native chat API (``POST /api/chat``, NDJSON: one JSON object per line).

Tool calls arrive whole, with arguments already an object; a line ``{"error": "..."}`` reports a
failure after the HTTP status was sent.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, ClassVar

import httpx

from coder_es.providers.accumulate import DeltaBlocks
from coder_es.providers.base import HTTPProvider, RetryCallback, Sleep, error_from_payload
from coder_es.providers.errors import ProviderConfigError, ServerError, StreamProtocolError
from coder_es.providers.images import is_image, wire_ollama
from coder_es.providers.openai import _result_text, function_tools
from coder_es.providers.retry import RetryPolicy
from coder_es.providers.sse import NDJSONDecoder, loads
from coder_es.providers.types import (
    Finish,
    MessageStart,
    ModelRequest,
    StreamEvent,
    ToolCallComplete,
    ToolCallDelta,
    ToolCallStart,
    UsageUpdate,
    empty_usage,
    message_blocks,
)

DEFAULT_HOST = "http://127.0.0.1:11434"

DONE_REASONS = {"stop": "end_turn", "length": "max_tokens"}


def host_url(value: str | None) -> str:
    """``OLLAMA_HOST`` as Ollama itself reads it: scheme and port optional, ``0.0.0.0`` (a bind
    address) meaning this machine."""
    raw = (value or "").strip().rstrip("/")
    if not raw:
        return DEFAULT_HOST
    if "://" not in raw:
        raw = f"http://{raw}"
    try:
        url = httpx.URL(raw)
    except httpx.InvalidURL as e:
        raise ProviderConfigError(f"OLLAMA_HOST={value!r} is not a valid host: {e}") from e
    if url.scheme not in ("http", "https") or not url.host:
        raise ProviderConfigError(f"OLLAMA_HOST={value!r} is not an http(s) host")
    host = "127.0.0.1" if url.host in ("0.0.0.0", "::") else url.host
    if ":" in host:
        host = f"[{host}]"
    port = url.port or (11434 if url.scheme == "http" else 443)
    path = url.path.rstrip("/")
    return f"{url.scheme}://{host}:{port}{path}"


class OllamaProvider(HTTPProvider):
    name: ClassVar[str] = "ollama"

    def __init__(
        self,
        model: str,
        *,
        base_url: str = DEFAULT_HOST,
        client: httpx.AsyncClient | None = None,
        retry: RetryPolicy | None = None,
        sleep: Sleep | None = None,
        on_retry: RetryCallback | None = None,
    ) -> None:
        super().__init__(
            model, base_url=base_url, client=client, retry=retry, sleep=sleep, on_retry=on_retry
        )

    @property
    def url(self) -> str:
        return f"{self.base_url}/api/chat"

    def headers(self) -> dict[str, str]:
        return {"accept": "application/x-ndjson"}

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        return build_ollama_body(request)

    def new_parser(self, model: str, request_id: str | None) -> OllamaParser:
        return OllamaParser(model, request_id)


def build_ollama_body(request: ModelRequest) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    # Ollama names the tool in a result rather than the call id.
    tool_names: dict[str, str] = {}
    for message in request.messages:
        blocks = message_blocks(message)
        text = "".join(b["text"] for b in blocks if b["type"] == "text")
        if message["role"] == "user":
            for b in blocks:
                if b["type"] == "tool_result":
                    messages.append(
                        {
                            "role": "tool",
                            "content": _result_text(b),
                            "tool_name": tool_names.get(b["tool_use_id"], ""),
                        }
                    )
            images = [wire_ollama(b) for b in blocks if is_image(b)]
            if images:
                messages.append({"role": "user", "content": text, "images": images})
            elif text:
                messages.append({"role": "user", "content": text})
            continue
        out: dict[str, Any] = {"role": "assistant", "content": text}
        thinking = "".join(b.get("thinking", "") for b in blocks if b["type"] == "thinking")
        if thinking:
            out["thinking"] = thinking
        calls = []
        for b in blocks:
            if b["type"] == "tool_use":
                tool_names[b["id"]] = b["name"]
                calls.append({"function": {"name": b["name"], "arguments": b["input"]}})
        if calls:
            out["tool_calls"] = calls
        messages.append(out)
    options: dict[str, Any] = {"num_predict": request.max_tokens}
    if request.temperature is not None:
        options["temperature"] = request.temperature
    if request.stop_sequences:
        options["stop"] = list(request.stop_sequences)
    body: dict[str, Any] = {
        "model": request.model,
        "messages": messages,
        "stream": True,
        "options": options,
    }
    tools = function_tools(request)
    if tools:
        body["tools"] = tools
    body.update(request.extra_body)
    return body


class OllamaParser:
    def __init__(self, model: str, request_id: str | None) -> None:
        self._lines = NDJSONDecoder()
        self._model = model
        self._request_id = request_id
        self._blocks = DeltaBlocks()
        self._calls: list[ToolCallComplete] = []
        self._started = False
        self._done = False

    def _protocol(self, message: str) -> StreamProtocolError:
        return StreamProtocolError(message, provider="ollama", request_id=self._request_id)

    def feed(self, chunk: bytes) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        for line in self._lines.feed(chunk):
            if not self._done:
                self._line(line, out)
        return out

    def close(self) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        cut = ""
        for line in self._lines.close():
            if not self._done:
                try:
                    self._line(line, out)
                except StreamProtocolError:
                    cut = " (cut inside a line)"
        if not self._done:
            pending = [c.name for c in self._calls]
            detail = f" after tool call(s) {pending}" if pending else ""
            raise self._protocol(f'the stream ended before the final "done" line{cut}{detail}')
        return out

    def _line(self, line: bytes, out: list[StreamEvent]) -> None:
        try:
            data = loads(line)
        except ValueError as e:
            raise self._protocol(f"line is not valid JSON: {e}: {line[:120]!r}") from None
        if not isinstance(data, dict):
            raise self._protocol("line is not a JSON object")
        if "error" in data:
            # Ollama's in-stream errors are untyped; they come from the model runner failing.
            raise error_from_payload("ollama", data, self._request_id, default=ServerError)
        if not self._started:
            self._started = True
            self._model = data.get("model") or self._model
            out.append(MessageStart(model=self._model, request_id=self._request_id))
        message = data.get("message") or {}
        thinking = message.get("thinking")
        if thinking:
            self._blocks.thinking(thinking, out)
        text = message.get("content")
        if text:
            self._blocks.text(text, out)
        for call in message.get("tool_calls") or ():
            self._tool_call(call, out)
        if data.get("done"):
            self._end(data, out)

    def _tool_call(self, call: dict[str, Any], out: list[StreamEvent]) -> None:
        function = call.get("function") or {}
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise self._protocol(f"tool call without a name: {call!r}"[:200])
        args = function.get("arguments", {})
        raw = args if isinstance(args, str) else json.dumps(args)
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except ValueError as e:
                raise self._protocol(f"tool call {name!r} has invalid arguments: {e}") from None
        if not isinstance(args, dict):
            raise self._protocol(f"tool call {name!r} arguments are not an object")
        # Older Ollama versions send no call id; the id only has to be unique in the conversation.
        call_id = call.get("id") or f"call_{uuid.uuid4().hex[:24]}"
        index = self._blocks.new_index()
        complete = ToolCallComplete(index, call_id, name, args)
        self._calls.append(complete)
        out.append(ToolCallStart(index, call_id, name))
        out.append(ToolCallDelta(index, raw))
        out.append(complete)

    def _end(self, data: dict[str, Any], out: list[StreamEvent]) -> None:
        usage = empty_usage()
        usage["input_tokens"] = int(data.get("prompt_eval_count") or 0)
        usage["output_tokens"] = int(data.get("eval_count") or 0)
        out.append(UsageUpdate(dict(usage)))
        out.extend(self._blocks.complete())
        raw = data.get("done_reason")
        stop = DONE_REASONS.get(raw or "stop", "other")
        if stop == "end_turn" and self._calls:
            stop = "tool_use"
        out.append(Finish(stop_reason=stop, usage=usage, raw_stop_reason=raw))
        self._done = True
