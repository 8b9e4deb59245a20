"""OpenAI Responses API (``POST /responses``, ``stream: true``, SSE of typed events).

Each output item becomes one block at the item's ``output_index``:

- ``message`` -> a text block (its text and refusal parts joined);
- ``function_call`` -> ``tool_use`` (``call_id`` is the id our ``tool_result`` answers);
- ``reasoning`` -> a ``thinking`` block whose text is the reasoning summary, with the whole item
  under ``"openai_reasoning"``: requests go with ``store: false`` and
  ``include: ["reasoning.encrypted_content"]``, so the item (its ``encrypted_content``) is what
  carries the model's reasoning into the next request, and it is sent back exactly as received.
  The thinking block has no signature, so the Anthropic adapter never sends it there;
- any other item (built-in tool calls a caller enabled through ``extra_body``) -> an
  ``{"type": "openai_item", "item": ...}`` block sent back to this API verbatim and to no other.

Nothing is kept on OpenAI's side (``store: false``): each request carries the whole conversation,
as with the other providers, so branching and replay work the same.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from coder_es.providers.base import WireParser, error_from_payload
from coder_es.providers.errors import ServerError, StreamProtocolError
from coder_es.providers.images import is_image, wire_openai_responses
from coder_es.providers.openai import OpenAIProvider, _result_text
from coder_es.providers.sse import SSEDecoder, loads
from coder_es.providers.types import (
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

NAME = "openai-responses"
REASONING_KEY = "openai_reasoning"
ITEM_BLOCK = "openai_item"

# incomplete_details.reason -> our stop reason
INCOMPLETE_REASONS = {"max_output_tokens": "max_tokens", "content_filter": "refusal"}


class OpenAIResponsesProvider(OpenAIProvider):
    """Same key, base URL and headers as Chat Completions; another endpoint and wire format."""

    name: ClassVar[str] = NAME

    @property
    def url(self) -> str:
        return f"{self.base_url}/responses"

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        return build_responses_body(request)

    def new_parser(self, model: str, request_id: str | None) -> WireParser:
        return ResponsesParser(model, request_id)


def _input_items(role: str, blocks: list[Block]) -> list[dict[str, Any]]:
    """One message's blocks as input items, in order: a reasoning item must directly precede
    the call or message it led to, so text is not gathered across other blocks."""
    items: list[dict[str, Any]] = []
    text: list[str] = []
    kind = "input_text" if role == "user" else "output_text"
    images: list[dict[str, Any]] = []
    for block in [*blocks, {"type": "end"}]:
        if block["type"] == "text":
            text.append(block["text"])
            continue
        if is_image(block) and role == "user":
            images.append(wire_openai_responses(block))
            continue
        if text or images:
            parts = [{"type": kind, "text": "".join(text)}] if text else []
            items.append({"role": role, "content": [*parts, *images]})
            text, images = [], []
        if block["type"] == "tool_result":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": block["tool_use_id"],
                    "output": _result_text(block),
                }
            )
        elif block["type"] == "tool_use":
            items.append(
                {
                    "type": "function_call",
                    "call_id": block["id"],
                    "name": block["name"],
                    "arguments": json.dumps(block["input"]),
                }
            )
        elif block["type"] == "thinking" and _has_encrypted_content(block.get(REASONING_KEY)):
            # Without store, a reasoning item only means something with its encrypted content
            # (an id alone names an item OpenAI did not keep).
            items.append(block[REASONING_KEY])
        elif block["type"] == ITEM_BLOCK and isinstance(block.get("item"), dict):
            items.append(block["item"])
        # Other providers' thinking and verbatim blocks mean nothing here.
    return items


def build_responses_body(request: ModelRequest) -> dict[str, Any]:
    items = [
        item
        for message in request.messages
        for item in _input_items(message["role"], message_blocks(message))
    ]
    body: dict[str, Any] = {
        "model": request.model,
        "input": items,
        "stream": True,
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "max_output_tokens": request.max_tokens,
    }
    if request.system:
        body["instructions"] = request.system
    tools = [
        {
            "type": "function",
            "name": t["name"],
            "description": t.get("description", ""),
            "parameters": t.get("input_schema") or {"type": "object", "properties": {}},
            "strict": False,
        }
        for t in request.tools
        if "input_schema" in t
    ]
    if tools:
        body["tools"] = tools
    if request.temperature is not None:
        body["temperature"] = request.temperature
    user_id = request.metadata.get("user_id")
    if isinstance(user_id, str):
        body["user"] = user_id
    # Stop sequences: the Responses API has none; they are dropped rather than rejected.
    body.update(request.extra_body)
    return body


def _usage(wire: Any) -> Usage:
    usage = empty_usage()
    if not isinstance(wire, dict):
        return usage
    details = wire.get("input_tokens_details")
    cached = details.get("cached_tokens") or 0 if isinstance(details, dict) else 0
    usage["input_tokens"] = max((wire.get("input_tokens") or 0) - cached, 0)
    usage["cache_read_tokens"] = cached
    usage["output_tokens"] = wire.get("output_tokens") or 0
    return usage


class _Item:
    __slots__ = ("item", "parts")

    def __init__(self, item: dict[str, Any]) -> None:
        self.item = item
        self.parts: list[str] = []


class ResponsesParser:
    """Responses API SSE events to normalized events."""

    def __init__(self, model: str, request_id: str | None) -> None:
        self._sse = SSEDecoder()
        self._model = model
        self._request_id = request_id
        self._open: dict[int, _Item] = {}
        self._calls = False
        self._started = False
        self._done = False

    def _protocol(self, message: str) -> StreamProtocolError:
        return StreamProtocolError(message, provider=NAME, request_id=self._request_id)

    def feed(self, chunk: bytes) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        for frame in self._sse.feed(chunk):
            if not self._done:
                self._frame(frame.event, frame.data, out)
        return out

    def close(self) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        frames, inside = self._sse.close_cut()
        cut = " (cut inside an event)" if inside else ""
        for frame in frames:
            if not self._done:
                self._frame(frame.event, frame.data, out)
        if not self._done:
            calls = [i.item.get("name") for i in self._open.values() if _is_call(i.item)]
            detail = f" with function call(s) {calls} incomplete" if calls else ""
            raise self._protocol(f"the stream ended before response.completed{cut}{detail}")
        return out

    def _frame(self, event: str | None, data: bytes, out: list[StreamEvent]) -> None:
        if data == b"[DONE]":  # some compatible servers end with it; completion came before
            return
        try:
            payload = loads(data)
        except ValueError as e:
            raise self._protocol(f"event {event!r} carries invalid JSON: {e}") from None
        if type(payload) is not dict:
            raise self._protocol(f"event {event!r} is not a JSON object")
        kind = payload.get("type") or event or ""
        if kind == "response.output_text.delta" or kind == "response.refusal.delta":
            self._delta(payload, out, text=True)
        elif kind == "response.function_call_arguments.delta":
            index = self._index(payload)
            state = self._open.get(index)
            if state is None:
                raise self._protocol(f"arguments for output item {index}, which is not open")
            delta = str(payload.get("delta") or "")
            state.parts.append(delta)
            if delta:
                out.append(ToolCallDelta(index, delta))
        elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            self._delta(payload, out, text=False)
        elif kind == "response.output_item.added":
            self._added(payload, out)
        elif kind == "response.output_item.done":
            self._item_done(payload, out)
        elif kind in ("response.created", "response.in_progress"):
            self._start(payload, out)
        elif kind in ("response.completed", "response.incomplete"):
            self._finish(payload, out)
        elif kind == "response.failed":
            response = payload.get("response") or {}
            raise self._error(response.get("error") or response)
        elif kind == "error":
            raise self._error(payload.get("error") or payload)
        # Events added after this code was written (and the *.done / part events whose content
        # output_item.done repeats) are ignored.

    def _error(self, err: Any) -> Exception:
        # The event's own "type" is "error": the code is what says which error it is; one that
        # names no known kind arrived in a 200 stream, so it is the server's (and retryable).
        if isinstance(err, dict):
            code = err.get("code") or err.get("type")
            err = {"error": {"type": code, "code": code, "message": err.get("message")}}
        return error_from_payload(NAME, err, self._request_id, default=ServerError)

    def _index(self, payload: dict[str, Any]) -> int:
        index = payload.get("output_index")
        if not isinstance(index, int):
            raise self._protocol(f"{payload.get('type')} without an integer output_index")
        return index

    def _start(self, payload: dict[str, Any], out: list[StreamEvent]) -> None:
        if self._started:
            return
        self._started = True
        response = payload.get("response") or {}
        self._model = response.get("model") or self._model
        out.append(
            MessageStart(
                model=self._model, message_id=response.get("id"), request_id=self._request_id
            )
        )

    def _added(self, payload: dict[str, Any], out: list[StreamEvent]) -> None:
        index = self._index(payload)
        item = payload.get("item")
        if not isinstance(item, dict) or not isinstance(item.get("type"), str):
            raise self._protocol(f"output item {index} without a type")
        if index in self._open:
            raise self._protocol(f"output item {index} added twice")
        self._open[index] = _Item(item)
        if _is_call(item):
            self._calls = True
            out.append(
                ToolCallStart(index, str(item.get("call_id", "")), str(item.get("name", "")))
            )

    def _delta(self, payload: dict[str, Any], out: list[StreamEvent], *, text: bool) -> None:
        index = self._index(payload)
        if index not in self._open:
            raise self._protocol(f"delta for output item {index}, which is not open")
        delta = str(payload.get("delta") or "")
        out.append(TextDelta(index, delta) if text else ThinkingDelta(index, delta))

    def _item_done(self, payload: dict[str, Any], out: list[StreamEvent]) -> None:
        index = self._index(payload)
        state = self._open.pop(index, None)
        item = payload.get("item")
        if state is None or not isinstance(item, dict):
            raise self._protocol(f"output_item.done for item {index}, which is not open")
        kind = item.get("type")
        if _is_call(item):
            arguments = item.get("arguments")
            text = arguments if isinstance(arguments, str) else "".join(state.parts)
            try:
                args = json.loads(text) if text.strip() else {}
            except ValueError as e:
                raise self._protocol(
                    f"function call {item.get('name')!r} has invalid arguments JSON: {e}"
                ) from None
            if not isinstance(args, dict):
                raise self._protocol(
                    f"function call {item.get('name')!r} arguments are not an object"
                )
            out.append(
                ToolCallComplete(
                    index, str(item.get("call_id", "")), str(item.get("name", "")), args
                )
            )
            return
        block: Block
        if kind == "message":
            block = {"type": "text", "text": _joined(item.get("content"), ("text", "refusal"))}
        elif kind == "reasoning":
            summary = _joined(item.get("summary"), ("text",), "\n\n")
            block = {"type": "thinking", "thinking": summary, "signature": "", REASONING_KEY: item}
        else:
            block = {"type": ITEM_BLOCK, "item": item}
        out.append(BlockComplete(index, block))

    def _finish(self, payload: dict[str, Any], out: list[StreamEvent]) -> None:
        if self._open:
            raise self._protocol(f"response ended with output items {sorted(self._open)} open")
        response = payload.get("response") or {}
        usage = _usage(response.get("usage"))
        out.append(UsageUpdate(dict(usage)))
        status = response.get("status")
        if status == "incomplete":
            reason = (response.get("incomplete_details") or {}).get("reason")
            stop, raw = INCOMPLETE_REASONS.get(str(reason), "other"), str(reason)
        else:
            stop, raw = ("tool_use" if self._calls else "end_turn"), str(status or "completed")
        out.append(Finish(stop_reason=stop, usage=usage, raw_stop_reason=raw))
        self._done = True


def _has_encrypted_content(item: Any) -> bool:
    return isinstance(item, dict) and bool(item.get("encrypted_content"))


def _is_call(item: dict[str, Any]) -> bool:
    return item.get("type") == "function_call"


def _joined(parts: Any, keys: tuple[str, ...], sep: str = "") -> str:
    if not isinstance(parts, list):
        return ""
    texts: list[str] = []
    for part in parts:
        if isinstance(part, dict):
            texts.extend(str(part[k]) for k in keys if isinstance(part.get(k), str))
    return sep.join(texts)
