"""Connection failures, timeouts and non-stream answers, the same for every HTTP provider."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import httpx
import pytest
from provider_wire import Sleeps, collect_until_error, request, run, wire

from coder_es.providers import (
    AnthropicProvider,
    HTTPProvider,
    NetworkError,
    OllamaProvider,
    OpenAIProvider,
    ProviderTimeoutError,
    Retrying,
    RetryPolicy,
    StreamFailed,
    StreamProtocolError,
    TextDelta,
)

Make = Callable[[httpx.AsyncClient, Sleeps], HTTPProvider]

PROVIDERS: dict[str, tuple[Make, str, str]] = {
    "anthropic": (
        lambda c, s: AnthropicProvider("m", api_key="k", client=c, sleep=s),
        "anthropic/text.sse",
        "text/event-stream",
    ),
    "openai": (
        lambda c, s: OpenAIProvider("m", api_key="k", client=c, sleep=s),
        "openai/text.sse",
        "text/event-stream",
    ),
    "ollama": (
        lambda c, s: OllamaProvider("m", client=c, sleep=s),
        "ollama/text.ndjson",
        "application/x-ndjson",
    ),
}


@pytest.fixture(params=sorted(PROVIDERS))
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_connection_errors_are_retried_then_succeed(kind: str) -> None:
    make, sample, content_type = PROVIDERS[kind]
    calls = 0

    def handler(req: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise httpx.ConnectError("connection refused", request=req)
        return httpx.Response(200, headers={"content-type": content_type}, content=wire(sample))

    sleeps = Sleeps()
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    events, error = run(collect_until_error(make(client, sleeps).stream(request())))
    assert error is None
    retries = [e for e in events if isinstance(e, Retrying)]
    assert [type(r.error) for r in retries] == [NetworkError, NetworkError]
    assert [r.attempt for r in retries] == [1, 2] and len(sleeps.delays) == 2


def test_connection_errors_give_up_after_the_bound(kind: str) -> None:
    make, _, _ = PROVIDERS[kind]

    def handler(req: httpx.Request) -> httpx.Response:
        raise httpx.ConnectTimeout("timed out", request=req)

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    provider = make(client, Sleeps())
    provider.retry = RetryPolicy(max_attempts=2)
    events, error = run(collect_until_error(provider.stream(request())))
    assert isinstance(error, ProviderTimeoutError)
    assert sum(isinstance(e, Retrying) for e in events) == 1
    assert isinstance(events[-1], StreamFailed)


def test_read_failure_after_content_is_not_retried(kind: str) -> None:
    make, sample, content_type = PROVIDERS[kind]
    data = wire(sample)
    calls = 0

    def handler(req: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1

        async def body() -> AsyncIterator[bytes]:
            yield data[: len(data) * 4 // 5]
            raise httpx.ReadTimeout("read timed out", request=req)

        return httpx.Response(200, headers={"content-type": content_type}, content=body())

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    events, error = run(collect_until_error(make(client, Sleeps()).stream(request())))
    assert isinstance(error, ProviderTimeoutError)
    assert any(isinstance(e, TextDelta) for e in events)
    assert calls == 1


def test_a_non_stream_answer_is_a_clear_error(kind: str) -> None:
    make, _, _ = PROVIDERS[kind]
    html = b"<html><body>Proxy login required</body></html>"

    def handler(req: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/html"}, content=html)

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    _, error = run(collect_until_error(make(client, Sleeps()).stream(request())))
    assert isinstance(error, StreamProtocolError)
    assert "expected a streamed response" in str(error) and "Proxy login" in str(error)
