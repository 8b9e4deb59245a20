"""Anthropic Messages API over recorded wire bytes."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator, Sequence

import pytest
from provider_wire import (
    FakeServer,
    Reply,
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
    AnthropicProvider,
    AuthenticationError,
    BlockComplete,
    ContextTooLongError,
    Finish,
    MessageStart,
    OverloadedError,
    RateLimitedError,
    Retrying,
    RetryPolicy,
    ServerError,
    StreamEvent,
    StreamFailed,
    StreamProtocolError,
    TextDelta,
    ThinkingDelta,
    ToolCallComplete,
    ToolCallDelta,
    ToolCallStart,
    assemble,
)


def provider(server: FakeServer, sleeps: Sleeps | None = None, **kw: object) -> AnthropicProvider:
    return AnthropicProvider(
        "claude-sonnet-4-5",
        api_key="sk-ant-test",
        base_url="https://api.example.test",
        client=server.client(),
        sleep=sleeps or Sleeps(),
        **kw,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("pieces", [1, 3, 7, 1000])
@pytest.mark.parametrize("line_endings", ["lf", "crlf"])
def test_text_stream_assembles_whatever_the_chunking(pieces: int, line_endings: str) -> None:
    data = wire("anthropic/text.sse")
    data = crlf(data) if line_endings == "crlf" else data
    server = FakeServer(sse_reply(data, pieces, **{"request-id": "req_abc"}))
    events: list[object] = []
    response = run(assemble(provider(server).stream(request()), events.append))
    assert response.text == "Hello! How can I help you today? ✨"
    assert response.stop_reason == "end_turn"
    assert response.request_id == "req_abc"
    assert response.message_id == "msg_01XFDUDYJgAACzvnptvVoYEL"
    assert response.model == "claude-sonnet-4-5-20250929"
    assert response.usage == {
        "input_tokens": 25,
        "output_tokens": 15,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
    }
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert deltas == ["Hello", "! How can", " I help you today? ✨"]
    assert isinstance(events[0], MessageStart)
    assert isinstance(events[-1], Finish)


def test_tool_call_input_is_buffered_until_the_block_stops() -> None:
    server = FakeServer(sse_reply(wire("anthropic/tool_use.sse"), 5))
    events = run(collect(provider(server).stream(request())))
    kinds = [type(e).__name__ for e in events]
    start = kinds.index("ToolCallStart")
    complete = kinds.index("ToolCallComplete")
    assert start < kinds.index("ToolCallDelta") < complete
    call = events[complete]
    assert isinstance(call, ToolCallComplete)
    assert (call.id, call.name, call.input) == (
        "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
        "read",
        {"path": "src/main.py", "offset": 10, "limit": 40},
    )
    partial = "".join(e.partial_json for e in events if isinstance(e, ToolCallDelta))
    assert json.loads(partial) == call.input
    finish = events[-1]
    assert isinstance(finish, Finish)
    assert finish.stop_reason == "tool_use"
    # Prompt caching figures from message_start survive the cumulative message_delta.
    assert finish.usage == {
        "input_tokens": 12,
        "output_tokens": 89,
        "cache_read_tokens": 14020,
        "cache_write_tokens": 1890,
    }


def test_thinking_keeps_its_signature_and_is_sent_back_intact() -> None:
    server = FakeServer(
        sse_reply(wire("anthropic/thinking.sse"), 11), sse_reply(wire("anthropic/text.sse"))
    )
    p = provider(server)
    events = run(collect(p.stream(request())))
    signatures = [e.signature for e in events if isinstance(e, ThinkingDelta) and e.signature]
    assert signatures == ["EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"]
    response = run(assemble(_replay(events)))
    thinking, text, tool = response.content
    assert text == {"type": "text", "text": "Running the test suite."}
    assert thinking == {
        "type": "thinking",
        "thinking": (
            "The user wants the tests run.\n\n1. Find the test command\n2. Run it with bash"
        ),
        "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds",
    }
    assert tool["input"] == {"command": "python -m pytest -q", "timeout_ms": 120000}
    follow_up = request(
        messages=[
            {"role": "user", "content": "Run the tests"},
            response.to_message(),
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": tool["id"],
                        "content": "3 passed",
                        "is_error": False,
                    }
                ],
            },
        ]
    )
    run(collect(p.stream(follow_up)))
    sent = server.body()["messages"][1]["content"]
    assert sent[0] == thinking


async def _replay(events: Sequence[StreamEvent]) -> AsyncIterator[StreamEvent]:
    for e in events:
        yield e


def test_blocks_we_do_not_execute_are_kept_verbatim_and_sent_back() -> None:
    server = FakeServer(
        sse_reply(wire("anthropic/server_tools.sse"), 13), sse_reply(wire("anthropic/text.sse"))
    )
    p = provider(server)
    response = run(p.complete(request()))
    kinds = [b["type"] for b in response.content]
    assert kinds == [
        "redacted_thinking",
        "text",
        "server_tool_use",
        "web_search_tool_result",
        "text",
    ]
    redacted, _, server_use, result, cited = response.content
    assert redacted["data"].startswith("EmwKAhgBEgy3va3pzix")
    assert server_use["input"] == {"query": "httpx 0.28 release"}
    assert result["content"][0]["url"] == "https://www.python-httpx.org/changelog/"
    assert cited["citations"][0]["cited_text"] == "0.28.0 drops the deprecated proxies argument"
    assert cited["text"] == "Version 0.28 removed the deprecated `proxies` argument."
    assert response.tool_calls == []  # server tools are not ours to run
    before = copy.deepcopy(response.content)
    run(
        collect(
            p.stream(
                request(
                    messages=[
                        {"role": "user", "content": "q"},
                        response.to_message(),
                        {"role": "user", "content": "thanks"},
                    ]
                )
            )
        )
    )
    assert server.body()["messages"][1]["content"] == before
    assert response.content == before  # building the body did not mutate the stored blocks


def test_pause_turn_is_reported_so_the_caller_continues() -> None:
    server = FakeServer(sse_reply(wire("anthropic/pause_turn.sse")))
    response = run(provider(server).complete(request()))
    assert response.stop_reason == "pause_turn"
    assert response.content[0]["type"] == "server_tool_use"


def test_overloaded_error_after_200_before_content_is_retried() -> None:
    sleeps = Sleeps()
    server = FakeServer(
        sse_reply(wire("anthropic/error_midstream.sse")), sse_reply(wire("anthropic/text.sse"))
    )
    retries: list[Retrying] = []
    p = provider(server, sleeps, on_retry=retries.append)
    events = run(collect(p.stream(request())))
    retrying = [e for e in events if isinstance(e, Retrying)]
    assert len(retrying) == 1 and retrying == retries
    assert isinstance(retrying[0].error, OverloadedError)
    assert len(sleeps.delays) == 1 and 0 < sleeps.delays[0] <= 0.5
    response = run(assemble(_replay(events)))
    assert response.text == "Hello! How can I help you today? ✨"
    assert len(server.requests) == 2


def test_error_after_content_is_not_retried_and_ends_with_an_error_event() -> None:
    server = FakeServer(sse_reply(wire("anthropic/error_after_text.sse")))
    events, error = run(collect_until_error(provider(server).stream(request())))
    assert isinstance(error, ServerError)
    assert "Internal server error" in str(error)
    assert isinstance(events[-1], StreamFailed) and events[-1].error is error
    assert len(server.requests) == 1


def test_truncated_tool_call_is_an_error_never_a_complete_call() -> None:
    data = wire("anthropic/tool_use.sse")
    cut = data.index(b"in.py")
    server = FakeServer(sse_reply(data[:cut], 9))
    events, error = run(collect_until_error(provider(server).stream(request())))
    assert isinstance(error, StreamProtocolError)
    assert "read" in str(error) and "incomplete" in str(error)
    assert not any(isinstance(e, ToolCallComplete) for e in events)
    assert any(isinstance(e, ToolCallStart) for e in events)


def test_truncation_right_after_a_complete_event_is_still_an_error() -> None:
    data = wire("anthropic/text.sse")
    cut = data.index(b"event: message_delta")
    server = FakeServer(sse_reply(data[:cut]))
    with pytest.raises(StreamProtocolError, match="before message_stop"):
        run(provider(server).complete(request()))


def test_invalid_tool_json_is_a_stream_error() -> None:
    data = wire("anthropic/tool_use.sse").replace(b'", \\"offset', b'", \\"offset\\"')
    server = FakeServer(sse_reply(data))
    with pytest.raises(StreamProtocolError, match="invalid input JSON"):
        run(provider(server).complete(request()))


def test_malformed_frame_json_is_a_stream_error() -> None:
    data = wire("anthropic/text.sse").replace(b'"text":"Hello"}', b'"text":"Hello"')
    server = FakeServer(sse_reply(data))
    with pytest.raises(StreamProtocolError, match="invalid JSON"):
        run(provider(server).complete(request()))


def test_unknown_events_deltas_and_comments_are_ignored() -> None:
    data = wire("anthropic/text.sse")
    extra = (
        b": this is a comment\n\n"
        b'event: brand_new_event\ndata: {"type":"brand_new_event","x":1}\n\n'
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"future_delta","stuff":true}}\n\n'
    )
    at = data.index(b"event: content_block_stop")
    server = FakeServer(sse_reply(data[:at] + extra + data[at:], 4))
    response = run(provider(server).complete(request()))
    assert response.text == "Hello! How can I help you today? ✨"


def test_request_body_headers_and_cache_breakpoints() -> None:
    server = FakeServer(sse_reply(wire("anthropic/text.sse")))
    messages = [
        {"role": "user", "content": "Fix the bug"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "from another provider", "signature": ""},
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a.py"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": "x = 1",
                    "is_error": False,
                },
            ],
        },
    ]
    tools = [
        {"name": "read", "description": "Read a file", "input_schema": {"type": "object"}},
        {"name": "bash", "description": "Run a command", "input_schema": {"type": "object"}},
    ]
    original = copy.deepcopy(messages)
    req = request(
        messages=messages,
        tools=tools,
        system="You are careful.",
        temperature=0.2,
        stop_sequences=["END"],
        metadata={"user_id": "u-1", "session": "s"},
        extra_body={"thinking": {"type": "enabled", "budget_tokens": 2048}},
    )
    run(provider(server).complete(req))
    sent = server.requests[0]
    assert sent.url == "https://api.example.test/v1/messages"
    assert sent.headers["x-api-key"] == "sk-ant-test"
    assert sent.headers["anthropic-version"] == "2023-06-01"
    body = server.body()
    assert body["stream"] is True and body["max_tokens"] == 4096
    assert body["system"] == [
        {"type": "text", "text": "You are careful.", "cache_control": {"type": "ephemeral"}}
    ]
    assert "cache_control" not in body["tools"][0]
    assert body["tools"][1]["cache_control"] == {"type": "ephemeral"}
    assert body["messages"][2]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert [b["type"] for b in body["messages"][1]["content"]] == ["text", "tool_use"]
    assert body["metadata"] == {"user_id": "u-1"}
    assert body["temperature"] == 0.2 and body["stop_sequences"] == ["END"]
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert messages == original


def test_rate_limit_honours_retry_after_then_succeeds() -> None:
    sleeps = Sleeps()
    server = FakeServer(
        json_reply(429, wire("anthropic/error_429.json"), **{"retry-after": "3"}),
        json_reply(
            529,
            b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
            **{"retry-after-ms": "1500"},
        ),
        sse_reply(wire("anthropic/text.sse")),
    )
    events = run(collect(provider(server, sleeps).stream(request())))
    errors = [type(e.error) for e in events if isinstance(e, Retrying)]
    assert errors == [RateLimitedError, OverloadedError]
    assert sleeps.delays == [3.0, 1.5]
    assert isinstance(events[-1], Finish)


def test_retries_are_bounded_and_the_last_error_is_raised() -> None:
    sleeps = Sleeps()
    body = b'{"type":"error","error":{"type":"api_error","message":"boom"}}'
    server = FakeServer(*[json_reply(500, body) for _ in range(3)])
    p = provider(server, sleeps, retry=RetryPolicy(max_attempts=3, base_delay_s=1, jitter=0))
    with pytest.raises(ServerError, match="boom") as info:
        run(p.complete(request()))
    assert info.value.status == 500
    assert sleeps.delays == [1, 2]
    assert len(server.requests) == 3


def test_x_should_retry_false_stops_a_retry() -> None:
    server = FakeServer(json_reply(503, b"upstream down", **{"x-should-retry": "false"}))
    with pytest.raises(ServerError, match="upstream down"):
        run(provider(server).complete(request()))
    assert len(server.requests) == 1


def test_x_should_retry_true_retries_a_400() -> None:
    server = FakeServer(
        json_reply(400, b"{}", **{"x-should-retry": "true"}), sse_reply(wire("anthropic/text.sse"))
    )
    assert run(provider(server).complete(request())).stop_reason == "end_turn"


def test_non_retryable_errors_are_typed() -> None:
    server = FakeServer(
        json_reply(401, wire("anthropic/error_401.json"), **{"request-id": "req_1"})
    )
    with pytest.raises(AuthenticationError, match="invalid x-api-key") as info:
        run(provider(server).complete(request()))
    assert info.value.request_id == "req_1"
    server = FakeServer(json_reply(400, wire("anthropic/error_prompt_too_long.json")))
    with pytest.raises(ContextTooLongError, match="prompt is too long"):
        run(provider(server).complete(request()))
    assert len(server.requests) == 1


def test_cancellation_closes_the_stream_promptly() -> None:
    data = wire("anthropic/text.sse")
    first = data[: data.index(b"event: content_block_stop")]
    hang = asyncio.Event()
    reply = Reply(200, [first], {"content-type": "text/event-stream"}, hang=hang)
    server = FakeServer(reply)

    async def scenario() -> list[object]:
        seen: list[object] = []
        got_text = asyncio.Event()

        async def consume() -> None:
            async for e in provider(server).stream(request()):
                seen.append(e)
                if isinstance(e, TextDelta):
                    got_text.set()

        task = asyncio.create_task(consume())
        await asyncio.wait_for(got_text.wait(), 2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 1)
        return seen

    seen = run(scenario())
    assert reply.closed == [True]
    assert not any(isinstance(e, Finish | BlockComplete) for e in seen)


@pytest.mark.parametrize(
    ("wire_reason", "expected"),
    [
        ("max_tokens", "max_tokens"),
        ("stop_sequence", "stop_sequence"),
        ("refusal", "refusal"),
        ("model_context_window_exceeded", "model_context_window_exceeded"),
        ("something_new", "other"),
    ],
)
def test_stop_reasons_are_mapped(wire_reason: str, expected: str) -> None:
    data = wire("anthropic/text.sse").replace(b'"end_turn"', f'"{wire_reason}"'.encode())
    response = run(provider(FakeServer(sse_reply(data))).complete(request()))
    assert (response.stop_reason, response.raw_stop_reason) == (expected, wire_reason)
