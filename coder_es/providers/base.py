"""The ``Provider`` interface, the shared HTTP streaming loop with retries, and stream assembly."""

from __future__ import annotations

import asyncio
import contextlib
import json
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, ClassVar, Protocol

import httpx

from coder_es.domain.chain import shown_in_json
from coder_es.providers.errors import (
    NetworkError,
    ProviderError,
    ProviderTimeoutError,
    ServerError,
    StreamProtocolError,
    error_class,
)
from coder_es.providers.retry import RetryPolicy, retry_after_seconds, should_retry
from coder_es.providers.types import (
    Block,
    BlockComplete,
    Finish,
    MessageStart,
    ModelRequest,
    ModelResponse,
    Retrying,
    StreamEvent,
    StreamFailed,
    TextDelta,
    ThinkingDelta,
    ToolCallComplete,
    ToolCallDelta,
    ToolCallStart,
    UsageUpdate,
    empty_usage,
)

Sleep = Callable[[float], Awaitable[None]]
RetryCallback = Callable[[Retrying], None]

# Events that carry model output: once one is delivered, a retry would duplicate content.
CONTENT_EVENTS = (
    TextDelta,
    ThinkingDelta,
    ToolCallStart,
    ToolCallDelta,
    ToolCallComplete,
    BlockComplete,
)


class Provider(ABC):
    """A model provider. ``stream`` is an async generator of normalized events.

    Close the generator if you stop early (``contextlib.aclosing``): that closes the HTTP
    response at once instead of whenever it is garbage-collected. Cancelling the consuming task
    closes it too.
    """

    name: ClassVar[str]
    model: str

    @abstractmethod
    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Send ``request`` and yield the response as it arrives. Raises ``ProviderError``."""

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Send ``request`` and return the assembled response."""
        return await assemble(self.stream(request))

    async def aclose(self) -> None:  # noqa: B027 - most providers own nothing to release
        """Release resources the provider owns (not a client that was passed in)."""


class WireParser(Protocol):
    """Turns a provider's response bytes into normalized events."""

    def feed(self, chunk: bytes) -> list[StreamEvent]: ...

    def close(self) -> list[StreamEvent]:
        """End of body: the remaining events, or ``StreamProtocolError`` if it was cut short."""
        ...


def error_from_response(
    provider: str,
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    request_id: str | None,
) -> ProviderError:
    """A typed error for a non-2xx answer, with the server's own message when it gave one."""
    error_type, message = _error_payload(body)
    if not message:
        text = body.decode("utf-8", "replace").strip()
        message = text[:500] if text else httpx.codes.get_reason_phrase(status) or "error"
    cls = error_class(status, error_type, message)
    return cls(
        message,
        provider=provider,
        status=status,
        request_id=request_id,
        error_type=error_type,
        retry_after=retry_after_seconds(headers),
    )


def error_from_payload(
    provider: str,
    payload: Any,
    request_id: str | None,
    status: int | None = None,
    default: type[ProviderError] = ProviderError,
) -> ProviderError:
    """A typed error for an error object that arrived inside a 200 stream (``default`` when the
    payload does not say what kind of error it is)."""
    error_type, message = _error_payload_obj(payload)
    message = message or json.dumps(payload)[:500]
    cls = error_class(status, error_type, message)
    if cls is ProviderError:
        cls = default
    return cls(
        message, provider=provider, status=status, request_id=request_id, error_type=error_type
    )


def _error_payload(body: bytes) -> tuple[str | None, str]:
    try:
        payload = json.loads(body)
    except ValueError:
        return None, ""
    return _error_payload_obj(payload)


def _error_payload_obj(payload: Any) -> tuple[str | None, str]:
    # Anthropic: {"type":"error","error":{"type","message"}}; OpenAI: {"error":{"message","type",
    # "code"}}; Ollama: {"error": "message"}.
    if not isinstance(payload, dict):
        return None, ""
    err = payload.get("error", payload)
    if isinstance(err, str):
        return None, err
    if not isinstance(err, dict):
        return None, ""
    code = err.get("code")
    kind = code if code == "context_length_exceeded" else err.get("type") or code
    message = err.get("message")
    return (str(kind) if kind else None), (str(message) if message else "")


class HTTPProvider(Provider):
    """A provider that POSTs JSON and parses a streamed body, with retries before any content."""

    request_id_header: ClassVar[str] = "x-request-id"

    def __init__(
        self,
        model: str,
        *,
        base_url: str,
        client: httpx.AsyncClient | None = None,
        retry: RetryPolicy | None = None,
        sleep: Sleep | None = None,
        on_retry: RetryCallback | None = None,
    ) -> None:
        self.model = model
        self.base_url = base_url.rstrip("/")
        self._owns_client = client is None
        self.client = client if client is not None else default_client()
        self.retry = retry or RetryPolicy()
        self.sleep = sleep if sleep is not None else asyncio.sleep
        self.on_retry = on_retry

    @property
    @abstractmethod
    def url(self) -> str:
        """The full endpoint URL."""

    @abstractmethod
    def headers(self) -> dict[str, str]:
        """Request headers (authentication, API version)."""

    @abstractmethod
    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON request body for this provider's wire format."""

    @abstractmethod
    def new_parser(self, model: str, request_id: str | None) -> WireParser:
        """A fresh parser for one response body."""

    async def aclose(self) -> None:
        if self._owns_client:
            await self.client.aclose()

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        body = self.build_body(request)
        # A non-UTF-8 file name in a tool result goes out as the \xE9 escapes a person sees.
        payload = shown_in_json(json.dumps(body, ensure_ascii=False)).encode()
        headers = {"content-type": "application/json", **self.headers()}
        attempt = 0
        while True:
            attempt += 1
            delivered = False
            response_headers: Mapping[str, str] = {}
            try:
                async with self.client.stream(
                    "POST", self.url, content=payload, headers=headers
                ) as response:
                    response_headers = response.headers
                    request_id = response.headers.get(self.request_id_header)
                    if response.status_code >= 300:
                        raw = await response.aread()
                        raise error_from_response(
                            self.name, response.status_code, response.headers, raw, request_id
                        )
                    content_type = response.headers.get("content-type", "")
                    if content_type.startswith(("application/json", "text/html")):
                        raise await self._not_a_stream(response, content_type, request_id)
                    parser = self.new_parser(request.model, request_id)
                    async for chunk in response.aiter_bytes():
                        for event in parser.feed(chunk):
                            if not delivered and isinstance(event, CONTENT_EVENTS):
                                delivered = True
                            yield event
                    for event in parser.close():
                        yield event
                    return
            except ProviderError as e:
                error = e
            except httpx.TimeoutException as e:
                error = ProviderTimeoutError(
                    f"timed out ({type(e).__name__}) talking to {self.url}", provider=self.name
                )
            except httpx.HTTPError as e:
                error = NetworkError(
                    f"{type(e).__name__} talking to {self.url}: {e}", provider=self.name
                )
            if not error.provider:
                error.provider = self.name
            retry = (
                not delivered
                and attempt < self.retry.max_attempts
                and should_retry(response_headers, error)
            )
            if not retry:
                yield StreamFailed(error)
                raise error
            delay = self.retry.delay(attempt, error)
            event = Retrying(attempt, self.retry.max_attempts, delay, error)
            if self.on_retry is not None:
                self.on_retry(event)
            yield event
            await self.sleep(delay)

    async def _not_a_stream(
        self, response: httpx.Response, content_type: str, request_id: str | None
    ) -> ProviderError:
        # A proxy's HTML page, or a server that ignored "stream": say so instead of failing
        # later with a puzzling parse error.
        raw = await response.aread()
        if content_type.startswith("application/json") and _error_payload(raw)[1]:
            return error_from_payload(self.name, json.loads(raw), request_id, default=ServerError)
        return StreamProtocolError(
            f"expected a streamed response from {self.url} but got {content_type}: "
            f"{raw[:200].decode('utf-8', 'replace')!r}",
            provider=self.name,
            request_id=request_id,
        )


def default_client() -> httpx.AsyncClient:
    """A client with timeouts suited to long model turns: the read timeout is per chunk."""
    return httpx.AsyncClient(
        timeout=httpx.Timeout(connect=15.0, read=300.0, write=60.0, pool=15.0),
        follow_redirects=False,
    )


_DELTAS = frozenset({TextDelta, ThinkingDelta, ToolCallDelta, ToolCallStart})


class ResponseAssembler:
    """Builds a ``ModelResponse`` from stream events; the same for every provider."""

    def __init__(self) -> None:
        self.blocks: dict[int, Block] = {}
        self.start: MessageStart | None = None
        self.finish: Finish | None = None
        self.usage = empty_usage()

    def feed(self, event: StreamEvent) -> None:
        if type(event) in _DELTAS:
            return  # deltas are for live display; complete blocks carry the same content
        if isinstance(event, ToolCallComplete | BlockComplete):
            self.blocks[event.index] = event.block
        elif isinstance(event, MessageStart):
            # A new attempt after a Retrying event starts over.
            self.start, self.blocks, self.usage = event, {}, dict(event.usage)
        elif isinstance(event, UsageUpdate):
            self.usage = dict(event.usage)
        elif isinstance(event, Finish):
            self.finish = event
            self.usage = dict(event.usage)
        elif isinstance(event, Retrying):
            self.blocks = {}

    def result(self) -> ModelResponse:
        if self.finish is None:
            raise StreamProtocolError("the stream ended without a finish event")
        start = self.start
        return ModelResponse(
            content=[self.blocks[i] for i in sorted(self.blocks)],
            stop_reason=self.finish.stop_reason,
            usage=self.usage,
            model=start.model if start else "",
            request_id=start.request_id if start else None,
            message_id=start.message_id if start else None,
            raw_stop_reason=self.finish.raw_stop_reason,
            stop_sequence=self.finish.stop_sequence,
        )


async def assemble(
    events: AsyncIterator[StreamEvent],
    on_event: Callable[[StreamEvent], None] | None = None,
) -> ModelResponse:
    """Drain a provider stream into a response, passing each event to ``on_event`` (live UI)."""
    assembler = ResponseAssembler()
    async with contextlib.aclosing(events) as stream:  # type: ignore[type-var]
        async for event in stream:
            if on_event is not None:
                on_event(event)
            assembler.feed(event)
    return assembler.result()
