"""Ollama /api/chat (NDJSON) over recorded wire bytes."""

from __future__ import annotations

import pytest
from provider_wire import (
    FakeServer,
    Reply,
    Sleeps,
    collect,
    collect_until_error,
    json_reply,
    request,
    run,
    split_every,
    wire,
)

from coder_es.providers import (
    Finish,
    NotFoundError,
    OllamaProvider,
    ProviderConfigError,
    ServerError,
    StreamProtocolError,
    TextDelta,
    ToolCallComplete,
    ToolCallStart,
)
from coder_es.providers.ollama import host_url


def ndjson(data: bytes, pieces: int = 7) -> Reply:
    return Reply(200, split_every(data, pieces), {"content-type": "application/x-ndjson"})


def provider(server: FakeServer) -> OllamaProvider:
    return OllamaProvider(
        "qwen3:8b", base_url="http://ollama.test:11434", client=server.client(), sleep=Sleeps()
    )


@pytest.mark.parametrize("pieces", [1, 10, 4096])
def test_text_stream(pieces: int) -> None:
    server = FakeServer(ndjson(wire("ollama/text.ndjson"), pieces))
    response = run(provider(server).complete(request()))
    assert response.text == "The sky is blue because of Rayleigh scattering."
    assert response.stop_reason == "end_turn"
    assert response.usage["input_tokens"] == 26 and response.usage["output_tokens"] == 298
    assert server.requests[0].url == "http://ollama.test:11434/api/chat"


def test_whole_tool_calls_with_thinking() -> None:
    server = FakeServer(ndjson(wire("ollama/tool_calls.ndjson")))
    events = run(collect(provider(server).stream(request())))
    assert any(isinstance(e, ToolCallStart) for e in events)
    [call] = [e for e in events if isinstance(e, ToolCallComplete)]
    assert call.name == "get_current_weather"
    assert call.input == {"format": "celsius", "location": "Toronto"}
    assert call.id.startswith("call_")
    response = run(
        provider(FakeServer(ndjson(wire("ollama/tool_calls.ndjson")))).complete(request())
    )
    assert response.stop_reason == "tool_use"
    assert response.content[0] == {
        "type": "thinking",
        "thinking": "The user wants the weather. I should call the tool.",
        "signature": "",
    }
    assert response.tool_calls[0]["input"] == {"format": "celsius", "location": "Toronto"}


def test_error_line_after_200() -> None:
    server = FakeServer(ndjson(wire("ollama/error_midstream.ndjson")))
    events, error = run(collect_until_error(provider(server).stream(request())))
    assert isinstance(error, ServerError)
    assert "unexpected EOF" in str(error)
    assert len(server.requests) == 1  # text was already delivered: no retry
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Let me", " think"]


def test_model_not_found() -> None:
    server = FakeServer(json_reply(404, wire("ollama/error_404.json")))
    with pytest.raises(NotFoundError, match="try pulling it first"):
        run(provider(server).complete(request()))


def test_truncated_stream() -> None:
    data = wire("ollama/tool_calls.ndjson")
    cut = data.rindex(b'{"model"')
    server = FakeServer(ndjson(data[: cut + 20]))
    events, error = run(collect_until_error(provider(server).stream(request())))
    assert isinstance(error, StreamProtocolError)
    assert "done" in str(error) and "get_current_weather" in str(error)
    assert not any(isinstance(e, Finish) for e in events)


def test_request_body() -> None:
    server = FakeServer(ndjson(wire("ollama/text.ndjson")))
    messages = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "call_7",
                    "name": "get_weather",
                    "input": {"city": "Oslo"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "call_7",
                    "content": "-3C",
                    "is_error": False,
                },
            ],
        },
    ]
    run(
        provider(server).complete(
            request(messages=messages, system="s", temperature=0.0, max_tokens=64)
        )
    )
    body = server.body()
    assert body["options"] == {"num_predict": 64, "temperature": 0.0}
    assert body["messages"] == [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}],
        },
        {"role": "tool", "content": "-3C", "tool_name": "get_weather"},
    ]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, "http://127.0.0.1:11434"),
        ("", "http://127.0.0.1:11434"),
        ("0.0.0.0", "http://127.0.0.1:11434"),
        ("gpu-box:8080", "http://gpu-box:8080"),
        ("https://ollama.example.com", "https://ollama.example.com:443"),
        ("http://[::1]:11434/", "http://[::1]:11434"),
    ],
)
def test_ollama_host_forms(value: str | None, expected: str) -> None:
    assert host_url(value) == expected


def test_bad_ollama_host() -> None:
    with pytest.raises(ProviderConfigError, match="OLLAMA_HOST"):
        host_url("ftp://x")
