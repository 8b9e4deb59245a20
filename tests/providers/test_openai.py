"""OpenAI-compatible Chat Completions over recorded wire bytes."""

from __future__ import annotations

import json

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
    ContextTooLongError,
    Finish,
    OpenAIProvider,
    RateLimitedError,
    Retrying,
    ServerError,
    StreamProtocolError,
    TextDelta,
    ThinkingDelta,
    ToolCallComplete,
    ToolCallDelta,
    ToolCallStart,
)


def provider(server: FakeServer, sleeps: Sleeps | None = None, **kw: object) -> OpenAIProvider:
    return OpenAIProvider(
        "gpt-4.1",
        api_key="sk-test",
        base_url="https://llm.example.test/v1",
        client=server.client(),
        sleep=sleeps or Sleeps(),
        **kw,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("pieces", [1, 6, 1000])
def test_text_stream_and_usage(pieces: int) -> None:
    server = FakeServer(
        sse_reply(crlf(wire("openai/text.sse")), pieces, **{"x-request-id": "req_9"})
    )
    response = run(provider(server).complete(request()))
    assert response.text == "Hello! How can I help you today?"
    assert response.stop_reason == "end_turn" and response.raw_stop_reason == "stop"
    assert response.request_id == "req_9"
    assert response.message_id == "chatcmpl-BJxyq3Sx0Jd2tR8JqZ6pN7sTqL9aF"
    assert response.usage == {
        "input_tokens": 19,
        "output_tokens": 10,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
    }


def test_parallel_tool_call_fragments_are_joined_per_index() -> None:
    server = FakeServer(sse_reply(wire("openai/tool_calls.sse"), 5))
    events = run(collect(provider(server).stream(request())))
    starts = [(e.index, e.id, e.name) for e in events if isinstance(e, ToolCallStart)]
    assert starts == [
        (0, "call_DdmO9pD3xa9XTPNJ32zg2hcA", "read"),
        (1, "call_ABmC2TwUhUU1bFPK9K6ZKvQq", "grep"),
    ]
    calls = [e for e in events if isinstance(e, ToolCallComplete)]
    assert [c.input for c in calls] == [
        {"path": "README.md"},
        {"pattern": "def \\w+", "ignore_case": True},
    ]
    first_complete = events.index(calls[0])
    assert all(not isinstance(e, ToolCallDelta) for e in events[first_complete:])
    finish = events[-1]
    assert isinstance(finish, Finish) and finish.stop_reason == "tool_use"
    # Cached prompt tokens are reported apart from the uncached input.
    assert finish.usage == {
        "input_tokens": 310,
        "output_tokens": 58,
        "cache_read_tokens": 1920,
        "cache_write_tokens": 0,
    }


def test_truncated_arguments_never_complete() -> None:
    data = wire("openai/tool_calls.sse")
    cut = data.index(b"DME.md")
    server = FakeServer(sse_reply(data[:cut]))
    events, error = run(collect_until_error(provider(server).stream(request())))
    assert isinstance(error, StreamProtocolError)
    assert "read" in str(error)
    assert not any(isinstance(e, ToolCallComplete) for e in events)


def test_missing_done_after_finish_is_accepted_but_missing_finish_is_not() -> None:
    data = wire("openai/text.sse").replace(b"data: [DONE]\n\n", b"")
    assert run(provider(FakeServer(sse_reply(data))).complete(request())).text.startswith("Hello")
    cut = data.index(b'"finish_reason":"stop"') - 300
    cut = data.rindex(b"\n\n", 0, cut) + 2
    with pytest.raises(StreamProtocolError, match="before a finish_reason"):
        run(provider(FakeServer(sse_reply(data[:cut]))).complete(request()))


def test_error_chunk_mid_stream() -> None:
    data = wire("openai/text.sse")
    at = data.index(b"data: ", 10)
    at = data.index(b"data: ", at + 1)
    err = b'data: {"error":{"message":"The server had an error","type":"server_error"}}\n\n'
    server = FakeServer(sse_reply(data[:at] + err))
    events, error = run(collect_until_error(provider(server).stream(request())))
    assert isinstance(error, ServerError) and "The server had an error" in str(error)
    assert any(isinstance(e, TextDelta) for e in events)
    assert len(server.requests) == 1  # content was delivered: no retry


def test_http_errors() -> None:
    sleeps = Sleeps()
    server = FakeServer(
        json_reply(429, wire("openai/error_429.json"), **{"retry-after-ms": "2400"}),
        json_reply(400, wire("openai/error_context.json")),
    )
    events, error = run(collect_until_error(provider(server, sleeps).stream(request())))
    assert [type(e.error) for e in events if isinstance(e, Retrying)] == [RateLimitedError]
    assert sleeps.delays == [2.4]
    assert isinstance(error, ContextTooLongError)
    assert "maximum context length" in str(error)


def test_reasoning_content_becomes_thinking() -> None:
    data = (
        b'data: {"id":"c1","model":"deepseek-r1","choices":[{"index":0,"delta":'
        b'{"role":"assistant","reasoning_content":"Think."}}]}\n\n'
        b'data: {"id":"c1","model":"deepseek-r1","choices":[{"index":0,"delta":'
        b'{"content":"Answer."},"finish_reason":"stop"}]}\n\n'
        b"data: [DONE]\n\n"
    )
    server = FakeServer(sse_reply(data))
    events = run(collect(provider(server).stream(request())))
    assert [e.thinking for e in events if isinstance(e, ThinkingDelta)] == ["Think."]
    response = run(provider(FakeServer(sse_reply(data))).complete(request()))
    assert response.content == [
        {"type": "thinking", "thinking": "Think.", "signature": ""},
        {"type": "text", "text": "Answer."},
    ]


def test_request_body_translates_blocks_to_chat_messages() -> None:
    server = FakeServer(sse_reply(wire("openai/text.sse")))
    messages = [
        {"role": "user", "content": "Look at README"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "s"},
                {"type": "text", "text": "Reading."},
                {
                    "type": "tool_use",
                    "id": "call_1",
                    "name": "read",
                    "input": {"path": "README.md"},
                },
                {"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "call_1",
                    "content": "no such file",
                    "is_error": True,
                },
                {"type": "text", "text": "Try again"},
            ],
        },
    ]
    tools = [
        {"name": "read", "description": "Read", "input_schema": {"type": "object"}},
        {"type": "web_search_20250305", "name": "web_search"},
    ]
    run(
        provider(server).complete(
            request(
                messages=messages,
                tools=tools,
                system="Be brief.",
                stop_sequences=["\n\n"],
                max_tokens=100,
            )
        )
    )
    sent = server.requests[0]
    assert sent.url == "https://llm.example.test/v1/chat/completions"
    assert sent.headers["authorization"] == "Bearer sk-test"
    body = server.body()
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 100 and body["stop"] == ["\n\n"]
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Look at README"},
        {
            "role": "assistant",
            "content": "Reading.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "read", "arguments": '{"path": "README.md"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "[error] no such file"},
        {"role": "user", "content": "Try again"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {"name": "read", "description": "Read", "parameters": {"type": "object"}},
        }
    ]


def test_whole_calls_without_index_are_kept_apart() -> None:
    def call(call_id: str, name: str, args: str) -> bytes:
        frag = {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
        chunk = {"id": "c", "model": "m", "choices": [{"delta": {"tool_calls": [frag]}}]}
        return b"data: " + json.dumps(chunk).encode() + b"\n\n"

    data = (
        call("call_a", "read", '{"path": "a"}')
        + call("call_b", "read", '{"path": "b"}')
        + b'data: {"id":"c","choices":[{"delta":{},"finish_reason":"tool_calls"}]}\n\n'
        + b"data: [DONE]\n\n"
    )
    response = run(provider(FakeServer(sse_reply(data))).complete(request()))
    assert [(c["id"], c["input"]) for c in response.tool_calls] == [
        ("call_a", {"path": "a"}),
        ("call_b", {"path": "b"}),
    ]


@pytest.mark.parametrize("pieces", [1, 7, 1000])
def test_a_refusal_is_the_answer_not_an_empty_turn(pieces: int) -> None:
    # The answer arrives in ``delta.refusal`` with ``content: null``: dropping it leaves the user
    # with an empty turn that looks like success.
    server = FakeServer(sse_reply(wire("openai/refusal.sse"), pieces))
    response = run(provider(server).complete(request()))
    assert response.text == "I'm very sorry, but I can't assist with that."
    assert response.stop_reason == "refusal" and response.raw_stop_reason == "stop"
    assert response.usage["output_tokens"] == 11
