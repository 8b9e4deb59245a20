"""OpenAI Responses API over recorded wire bytes (event sequences written from the API reference's
streaming events: response.created ... response.completed, error, response.failed)."""

from __future__ import annotations

import pytest
from provider_wire import (
    FakeServer,
    Sleeps,
    collect,
    collect_until_error,
    crlf,
    json_reply,
    request,
    run,
    sse_reply,
    wire,
)

from coder_es.providers import (
    Finish,
    OpenAIResponsesProvider,
    RateLimitedError,
    Retrying,
    RetryPolicy,
    ServerError,
    StreamFailed,
    StreamProtocolError,
    TextDelta,
    ThinkingDelta,
    ToolCallComplete,
    ToolCallDelta,
    ToolCallStart,
    assemble,
    build_provider,
)
from coder_es.providers.anthropic import build_anthropic_body
from coder_es.providers.openai_responses import REASONING_KEY

TOOL = {"name": "read", "description": "Read a file", "input_schema": {"type": "object"}}


def provider(
    server: FakeServer, sleeps: Sleeps | None = None, **kw: object
) -> OpenAIResponsesProvider:
    return OpenAIResponsesProvider(
        "gpt-5",
        api_key="sk-test",
        base_url="https://api.example.test/v1",
        client=server.client(),
        sleep=sleeps or Sleeps(),
        **kw,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("pieces", [1, 5, 64, 100_000])
@pytest.mark.parametrize("line_endings", ["lf", "crlf"])
def test_reasoning_text_and_function_call_assemble(pieces: int, line_endings: str) -> None:
    data = wire("openai/responses_reasoning_tool.sse")
    server = FakeServer(sse_reply(crlf(data) if line_endings == "crlf" else data, pieces))
    events = run(collect(provider(server).stream(request())))
    thinking = "".join(e.thinking for e in events if isinstance(e, ThinkingDelta))
    assert thinking.startswith("**Finding the entry point**")
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == (
        "Let me read `src/app.py` — it holds `main`."
    )
    assert [e.name for e in events if isinstance(e, ToolCallStart)] == ["read"]
    assert "".join(e.partial_json for e in events if isinstance(e, ToolCallDelta)) == (
        '{"path":"src/app.py"}'
    )
    (call,) = [e for e in events if isinstance(e, ToolCallComplete)]
    assert (call.id, call.input) == ("call_X2fGk8hQ0rVn3LmP9sTy1wZa", {"path": "src/app.py"})
    finish = events[-1]
    assert isinstance(finish, Finish)
    assert finish.stop_reason == "tool_use"
    # Cached input is reported apart, as for the other providers.
    assert finish.usage == {
        "input_tokens": 307,
        "output_tokens": 212,
        "cache_read_tokens": 1536,
        "cache_write_tokens": 0,
    }


def test_reasoning_items_and_calls_go_back_in_the_next_request() -> None:
    server = FakeServer(
        sse_reply(wire("openai/responses_reasoning_tool.sse")),
        sse_reply(wire("openai/responses_incomplete.sse")),
    )
    p = provider(server)
    response = run(p.complete(request(system="Be brief.", tools=[TOOL])))
    reasoning, text, call = response.content
    assert reasoning["type"] == "thinking" and reasoning["signature"] == ""
    item = reasoning[REASONING_KEY]
    assert item["encrypted_content"].startswith("gAAAAABor0Az")
    first = server.body(0)
    assert first["store"] is False
    assert first["include"] == ["reasoning.encrypted_content"]
    assert first["instructions"] == "Be brief."
    assert first["tools"] == [
        {
            "type": "function",
            "name": "read",
            "description": "Read a file",
            "parameters": {"type": "object"},
            "strict": False,
        }
    ]
    result = {"type": "tool_result", "tool_use_id": call["id"], "content": "def main(): ..."}
    follow_up = request(
        messages=[
            {"role": "user", "content": "What does main do?"},
            response.to_message(),
            {"role": "user", "content": [result]},
        ]
    )
    run(collect(p.stream(follow_up)))
    assert server.body()["input"] == [
        {"role": "user", "content": [{"type": "input_text", "text": "What does main do?"}]},
        item,  # exactly as received, encrypted content included
        {"role": "assistant", "content": [{"type": "output_text", "text": text["text"]}]},
        {
            "type": "function_call",
            "call_id": "call_X2fGk8hQ0rVn3LmP9sTy1wZa",
            "name": "read",
            "arguments": '{"path": "src/app.py"}',
        },
        {
            "type": "function_call_output",
            "call_id": "call_X2fGk8hQ0rVn3LmP9sTy1wZa",
            "output": "def main(): ...",
        },
    ]
    # Another provider gets neither the unsigned reasoning nor OpenAI's encrypted item.
    anthropic = build_anthropic_body(follow_up)
    assert [b["type"] for b in anthropic["messages"][1]["content"]] == ["text", "tool_use"]


def test_thinking_from_another_provider_is_not_sent() -> None:
    signed = {"type": "thinking", "thinking": "hmm", "signature": "EqQB"}
    redacted = {"type": "redacted_thinking", "data": "EmwK"}
    server = FakeServer(sse_reply(wire("openai/responses_incomplete.sse")))
    history = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [signed, redacted, {"type": "text", "text": "a"}]},
        {"role": "user", "content": "more"},
    ]
    run(collect(provider(server).stream(request(messages=history))))
    assert [i.get("type", i.get("role")) for i in server.body()["input"]] == [
        "user",
        "assistant",
        "user",
    ]


def test_incomplete_response_stops_with_max_tokens() -> None:
    server = FakeServer(sse_reply(wire("openai/responses_incomplete.sse")))
    response = run(provider(server).complete(request()))
    assert response.stop_reason == "max_tokens"
    assert response.raw_stop_reason == "max_output_tokens"
    assert response.text == "`main` parses the"
    assert response.usage["output_tokens"] == 16


def test_error_event_before_content_is_typed_and_retried() -> None:
    sleeps = Sleeps()
    server = FakeServer(
        sse_reply(wire("openai/responses_error.sse")),
        sse_reply(wire("openai/responses_incomplete.sse")),
    )
    events = run(collect(provider(server, sleeps).stream(request())))
    (retry,) = [e for e in events if isinstance(e, Retrying)]
    assert isinstance(retry.error, RateLimitedError)
    assert "Rate limit reached" in str(retry.error)
    assert len(sleeps.delays) == 1
    response = run(assemble(_iter(events)))
    assert response.text == "`main` parses the"


async def _iter(events: list) -> object:  # type: ignore[type-arg]
    for e in events:
        yield e


def test_failed_response_is_a_server_error_and_retries_are_bounded() -> None:
    failed = wire("openai/responses_failed.sse")
    server = FakeServer(*(sse_reply(failed) for _ in range(2)))
    p = provider(server, retry=RetryPolicy(max_attempts=2))
    events, error = run(collect_until_error(p.stream(request())))
    assert isinstance(error, ServerError)
    assert error.provider == "openai-responses"
    assert isinstance(events[-1], StreamFailed)
    assert len(server.requests) == 2


def test_http_error_body_is_typed() -> None:
    server = FakeServer(json_reply(429, wire("openai/error_429.json")))
    p = provider(server, retry=RetryPolicy(max_attempts=1))
    _, error = run(collect_until_error(p.stream(request())))
    assert isinstance(error, RateLimitedError)


@pytest.mark.parametrize("cut", [0.3, 0.75, 0.99])
def test_cut_stream_is_an_error_never_a_partial_response(cut: float) -> None:
    data = wire("openai/responses_reasoning_tool.sse")
    server = FakeServer(sse_reply(data[: int(len(data) * cut)]))
    p = provider(server, retry=RetryPolicy(max_attempts=1))
    events, error = run(collect_until_error(p.stream(request())))
    assert isinstance(error, StreamProtocolError)
    assert not any(isinstance(e, Finish) for e in events)


def test_factory_builds_it_and_needs_a_key_for_openai() -> None:
    p = build_provider("openai-responses", "gpt-5", env={"OPENAI_API_KEY": "sk-x"})
    assert isinstance(p, OpenAIResponsesProvider)
    assert p.url == "https://api.openai.com/v1/responses"
    local = build_provider(
        "openai-responses", "m", env={"OPENAI_BASE_URL": "http://127.0.0.1:8000/v1"}
    )
    assert local.url == "http://127.0.0.1:8000/v1/responses"  # type: ignore[attr-defined]
    with pytest.raises(Exception, match="OPENAI_API_KEY"):
        build_provider("openai-responses", "gpt-5", env={})
