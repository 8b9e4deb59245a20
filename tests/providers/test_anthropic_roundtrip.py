"""Every block of an Anthropic response goes back in the next request exactly as the API sent it.

Server tools (web search, web fetch, code execution), thinking with its signature, redacted
thinking and citations must be returned unchanged or the API rejects the conversation (a changed
thinking block fails its signature check). The wire sample is written from the public "Streaming
Messages", "Web fetch tool" and "Code execution tool" documentation; the property test builds
streams of known and unknown block types and checks both the assembly and the next request body.
"""

from __future__ import annotations

import copy
import itertools
import json
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from provider_wire import FakeServer, collect, request, run, sse_reply, wire

from coder_es.providers import AnthropicProvider, ModelResponse


def provider(client: httpx.AsyncClient) -> AnthropicProvider:
    return AnthropicProvider(
        "claude-sonnet-4-5",
        api_key="sk-ant-test",
        base_url="https://api.example.test",
        client=client,
    )


def round_trip(stream: bytes, pieces: Any = 9) -> tuple[ModelResponse, list[dict[str, Any]]]:
    """The assembled response, and the assistant content of the request that follows it."""
    server = FakeServer(sse_reply(stream, pieces), sse_reply(wire("anthropic/text.sse")))

    async def both() -> ModelResponse:
        async with server.client() as client:
            p = provider(client)
            response = await p.complete(request())
            follow_up = request(
                messages=[
                    {"role": "user", "content": "q"},
                    # Stored as JSON in an event and read back: the next request is built from it.
                    json.loads(json.dumps(response.to_message())),
                    {"role": "user", "content": "go on"},
                ]
            )
            await collect(p.stream(follow_up))
            return response

    response = run(both())
    sent: list[dict[str, Any]] = server.body()["messages"][1]["content"]
    return response, sent


def test_web_fetch_code_execution_thinking_and_citations_go_back_unchanged() -> None:
    response, sent = round_trip(wire("anthropic/server_tools_fetch_code.sse"))
    assert [b["type"] for b in response.content] == [
        "thinking",
        "server_tool_use",
        "web_fetch_tool_result",
        "server_tool_use",
        "bash_code_execution_tool_result",
        "text",
        "text",
    ]
    thinking, fetch, fetched, bash, bash_result, plain, cited = response.content
    assert thinking["signature"].startswith("EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgx")
    assert thinking["thinking"].endswith("count the entries with code execution.")
    assert fetch["input"] == {"url": "https://www.python-httpx.org/changelog/"}
    assert fetched["content"]["content"]["source"]["data"].startswith("## 0.28.1")
    assert bash["input"] == {"command": "printf '%s\\n' 0.28.1 0.28.0 | wc -l"}
    assert bash_result["content"]["stdout"] == "2\n"
    # "citations": null on a start is "no citations", not a field to send back.
    assert plain == {"type": "text", "text": "Two releases are listed. "}
    assert cited["citations"][0]["type"] == "char_location"
    assert cited["citations"][0]["end_char_index"] == 176
    assert response.tool_calls == []
    assert response.usage["cache_read_tokens"] == 2048
    assert sent == response.content


# --- Property: any sequence of block types, known or not -----------------------------------------

_names = st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12)
_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)
_json: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_names, inner, max_size=3),
    max_leaves=8,
)
_objects = st.dictionaries(_names, _json, max_size=4)


def _pieces(draw: st.DrawFn, value: str) -> list[str]:
    cuts = sorted(draw(st.sets(st.integers(0, len(value)), max_size=3)))
    bounds = [0, *cuts, len(value)]
    return [value[a:b] for a, b in itertools.pairwise(bounds)]


@st.composite
def blocks(draw: st.DrawFn) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(delta payloads, the block they assemble to); the first payload is the block's start."""
    kind = draw(
        st.sampled_from(
            ["text", "cited", "thinking", "redacted", "tool", "server", "result", "unknown"]
        )
    )
    if kind in ("text", "cited"):
        text = draw(_text)
        citations = draw(st.lists(_objects, min_size=1, max_size=2)) if kind == "cited" else []
        start: dict[str, Any] = {"type": "text", "text": ""}
        if citations or draw(st.booleans()):
            start["citations"] = [] if citations or draw(st.booleans()) else None
        deltas = [{"type": "citations_delta", "citation": c} for c in citations]
        deltas += [{"type": "text_delta", "text": t} for t in _pieces(draw, text)]
        expected: dict[str, Any] = {"type": "text", "text": text}
        if citations:
            expected["citations"] = citations
        return [start, *deltas], expected
    if kind == "thinking":
        thinking, signature = draw(_text), draw(st.text("ABCDEFabcdef0123456789+/=", min_size=1))
        deltas = [{"type": "thinking_delta", "thinking": t} for t in _pieces(draw, thinking)]
        deltas.append({"type": "signature_delta", "signature": signature})
        expected = {"type": "thinking", "thinking": thinking, "signature": signature}
        return [{"type": "thinking", "thinking": "", "signature": ""}, *deltas], expected
    if kind in ("tool", "server"):
        block_type = "tool_use" if kind == "tool" else "server_tool_use"
        ident, name, args = draw(_names), draw(_names), draw(_objects)
        start = {"type": block_type, "id": ident, "name": name, "input": {}}
        deltas = [
            {"type": "input_json_delta", "partial_json": part}
            for part in _pieces(draw, json.dumps(args))
        ]
        return [start, *deltas], {**start, "input": args}
    if kind == "redacted":
        block = {"type": "redacted_thinking", "data": draw(st.text("ABCDEFabcdef0123456789+/="))}
        return [block], block
    block_type = (
        draw(
            st.sampled_from(
                [
                    "web_search_tool_result",
                    "web_fetch_tool_result",
                    "code_execution_tool_result",
                    "bash_code_execution_tool_result",
                    "text_editor_code_execution_tool_result",
                    "mcp_tool_result",
                ]
            )
        )
        if kind == "result"
        else "future_" + draw(_names)
    )
    fields = {k: v for k, v in draw(_objects).items() if k not in ("type", "text", "input")}
    block = {"type": block_type, **fields}
    # Delta types we do not know are ignored: the block stays as its start carried it.
    deltas = [{"type": "future_delta", "value": v} for v in draw(st.lists(_json, max_size=2))]
    if kind == "unknown" and draw(st.booleans()):
        # A new block type streaming with a delta we know: that delta's field fills in.
        text = draw(_text)
        deltas += [{"type": "text_delta", "text": t} for t in _pieces(draw, text)]
        return [{**block, "text": ""}, *deltas], {**block, "text": text}
    return [block, *deltas], block


def _frame(data: dict[str, Any]) -> str:
    return f"event: {data['type']}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


def _stream(specs: list[tuple[list[dict[str, Any]], dict[str, Any]]], noise: list[bool]) -> bytes:
    usage = {"input_tokens": 5, "output_tokens": 1}
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": []}
    frames = [_frame({"type": "message_start", "message": {**message, "usage": usage}})]
    for index, ((start, *deltas), _) in enumerate(specs):
        frames.append(
            _frame({"type": "content_block_start", "index": index, "content_block": start})
        )
        for delta in deltas:
            frames.append(_frame({"type": "content_block_delta", "index": index, "delta": delta}))
            if noise[index % len(noise)]:
                frames.append(_frame({"type": "ping"}))
                frames.append(_frame({"type": "future_event", "index": index}))
        frames.append(_frame({"type": "content_block_stop", "index": index}))
    frames.append(
        _frame(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 9},
            }
        )
    )
    frames.append(_frame({"type": "message_stop"}))
    return "".join(frames).encode()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=st.lists(blocks(), min_size=1, max_size=6),
    noise=st.lists(st.booleans(), min_size=1, max_size=3),
    cuts=st.lists(st.integers(1, 4000), max_size=6),
)
def test_any_mix_of_blocks_assembles_and_goes_back_unchanged(
    specs: list[tuple[list[dict[str, Any]], dict[str, Any]]], noise: list[bool], cuts: list[int]
) -> None:
    expected = [copy.deepcopy(block) for _, block in specs]
    response, sent = round_trip(_stream(specs, noise), cuts)
    assert response.content == expected
    assert sent == expected


def test_a_compaction_block_keeps_its_summary_and_goes_back_with_it() -> None:
    # Context compaction streams its summary in ``compaction_delta`` events; a block kept with
    # ``content: null`` would be a no-op when sent back, and the compacted context would be lost.
    response, sent = round_trip(wire("anthropic/compaction.sse"), pieces=5)
    compaction, text = response.content
    assert compaction == {
        "type": "compaction",
        "content": "The user asked to fix the failing test in tests/test_add.py. "
        "The bug was in add() in calc.py; it was fixed and pytest passes.",
        "encrypted_content": "EqQBCkYICRgCKkB1c2VyX3N1bW1hcnlfdjE=",
    }
    assert text == {"type": "text", "text": "Continuing: the test suite is green."}
    assert sent[0] == compaction
