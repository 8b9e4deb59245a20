"""Provider streaming overhead: our SSE parsing and event layer against reading the same bytes.

    python3 bench/providers.py [--mb 8] [--runs 7] [--chunk 4096]

For a large recorded-style stream (Anthropic and OpenAI shapes: many small text deltas plus a
tool call whose input arrives in fragments) served by httpx.MockTransport, all in one process:

- raw:     read the body bytes from the same client and transport (nothing parsed);
- by hand: read, split lines, ``json.loads`` every ``data:`` line (the floor for any parser),
  and the same with ``JSONDecoder.raw_decode`` on decoded text (the decoding trick our parser
  uses, so the stricter floor);
- ours:    ``provider.stream()`` yielding normalized events, and ``provider.complete()``.

It prints medians, MB/s and ratios against "by hand" (target: ours <= 1.5x), and the time from
the first byte leaving the transport to the first TextDelta reaching the caller, minus the same
for a raw reader (target: < 1 ms of our overhead).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx

from coder_es.providers import (
    AnthropicProvider,
    ModelRequest,
    OpenAIProvider,
    TextDelta,
)
from coder_es.providers.base import HTTPProvider

WORDS = [
    "the",
    "event",
    "log",
    "is",
    "the",
    "source",
    "of",
    "truth",
    "and",
    "every",
    "projection",
    "can",
    "be",
    "rebuilt",
    "from",
    "it",
    "so",
    "a",
    "replay",
    "of",
    "the",
    "session",
    "reproduces",
    "the",
    "same",
    "requests",
    "byte",
    "for",
    "byte",
    "✓",
]


def _c(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def anthropic_stream(target_bytes: int) -> bytes:
    out = [
        "event: message_start\ndata: "
        + _c(
            {
                "type": "message_start",
                "message": {
                    "id": "msg_bench",
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-sonnet-4-5",
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 1200, "output_tokens": 1},
                },
            }
        )
        + "\n\n",
        'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
        '"content_block":{"type":"text","text":""}}\n\n',
    ]
    size = sum(map(len, out))
    i = 0
    while size < target_bytes * 0.8:
        text = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(1 + i % 3))
        frame = "event: content_block_delta\ndata: " + _c(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": text},
            }
        )
        out.append(frame + "\n\n")
        size += len(frame) + 2
        i += 1
    out.append('event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n')
    out.append(
        'event: content_block_start\ndata: {"type":"content_block_start","index":1,'
        '"content_block":{"type":"tool_use","id":"toolu_bench","name":"write","input":{}}}\n\n'
    )
    payload = json.dumps({"path": "notes.md", "content": " ".join(WORDS) * 400})
    for k in range(0, len(payload), 24):
        frame = "event: content_block_delta\ndata: " + _c(
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": payload[k : k + 24]},
            }
        )
        out.append(frame + "\n\n")
    out.append('event: content_block_stop\ndata: {"type":"content_block_stop","index":1}\n\n')
    out.append(
        'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"tool_use",'
        '"stop_sequence":null},"usage":{"output_tokens":9000}}\n\n'
    )
    out.append('event: message_stop\ndata: {"type":"message_stop"}\n\n')
    return "".join(out).encode()


def openai_stream(target_bytes: int) -> bytes:
    base = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    out = []
    size = 0
    i = 0
    while size < target_bytes * 0.8:
        text = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(1 + i % 3))
        chunk = {
            **base,
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
        }
        frame = "data: " + _c(chunk) + "\n\n"
        out.append(frame)
        size += len(frame)
        i += 1
    payload = json.dumps({"path": "notes.md", "content": " ".join(WORDS) * 400})
    first = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "write"}}
    out.append("data: " + _c({**base, "choices": [{"index": 0, "delta": {"tool_calls": [first]}}]}))
    out.append("\n\n")
    for k in range(0, len(payload), 24):
        frag = {"index": 0, "function": {"arguments": payload[k : k + 24]}}
        delta = {"tool_calls": [frag]}
        out.append("data: " + _c({**base, "choices": [{"index": 0, "delta": delta}]}) + "\n\n")
    fin = {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
    out.append("data: " + _c(fin) + "\n\n")
    usage = {"prompt_tokens": 10, "completion_tokens": 9000, "total_tokens": 9010}
    out.append("data: " + _c({**base, "choices": [], "usage": usage}) + "\n\n")
    out.append("data: [DONE]\n\n")
    return "".join(out).encode()


class Wire:
    """A transport serving ``data`` in ``chunk``-sized reads; records when the first byte left."""

    def __init__(self, data: bytes, chunk: int) -> None:
        self.chunks = [data[i : i + chunk] for i in range(0, len(data), chunk)]
        self.first_byte_at = 0.0

    def handler(self, request: httpx.Request) -> httpx.Response:
        async def body() -> AsyncIterator[bytes]:
            self.first_byte_at = time.perf_counter()
            for c in self.chunks:
                yield c

        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body())

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(self.handler))


async def read_raw(client: httpx.AsyncClient, url: str) -> int:
    n = 0
    async with client.stream("POST", url, content=b"{}") as r:
        async for chunk in r.aiter_bytes():
            n += len(chunk)
    return n


async def by_hand(client: httpx.AsyncClient, url: str) -> int:
    """The least a parser must do: split lines, JSON-decode each data line."""
    frames = 0
    buf = b""
    async with client.stream("POST", url, content=b"{}") as r:
        async for chunk in r.aiter_bytes():
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if line.startswith(b"data: ") and line != b"data: [DONE]":
                    json.loads(line[6:])
                    frames += 1
    return frames


_raw_decode = json.JSONDecoder().raw_decode


async def by_hand_fast(client: httpx.AsyncClient, url: str) -> int:
    """The same with the fastest stdlib decoding (what our parser uses): a stricter floor."""
    frames = 0
    buf = b""
    async with client.stream("POST", url, content=b"{}") as r:
        async for chunk in r.aiter_bytes():
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if line.startswith(b"data: ") and line != b"data: [DONE]":
                    _raw_decode(line[6:].decode())
                    frames += 1
    return frames


async def ours_stream(provider: HTTPProvider, request: ModelRequest) -> int:
    n = 0
    async for _ in provider.stream(request):
        n += 1
    return n


async def ours_complete(provider: HTTPProvider, request: ModelRequest) -> int:
    return len((await provider.complete(request)).content)


def median_times(fns: list[Callable[[], Any]], runs: int) -> list[float]:
    """Median seconds of each; the variants take turns so machine load drifts hit all alike."""
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(runs):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            asyncio.run(fn())
            times[i].append(time.perf_counter() - start)
    return [statistics.median(t) for t in times]


async def first_delta_latency(provider: HTTPProvider, wire: Wire, request: ModelRequest) -> float:
    async for event in provider.stream(request):
        if isinstance(event, TextDelta):
            return time.perf_counter() - wire.first_byte_at
    raise AssertionError("no text delta")


async def first_chunk_latency(client: httpx.AsyncClient, wire: Wire, url: str) -> float:
    async with client.stream("POST", url, content=b"{}") as r:
        async for _ in r.aiter_bytes():
            return time.perf_counter() - wire.first_byte_at
    raise AssertionError("no bytes")


def bench(
    name: str, data: bytes, make: Callable[[httpx.AsyncClient], HTTPProvider], args: Any
) -> None:
    wire = Wire(data, args.chunk)
    request = ModelRequest(model="m", messages=[{"role": "user", "content": "go"}])
    url = make(wire.client()).url
    mb = len(data) / 1e6

    def with_client(coro_fn: Callable[..., Any], *extra: Any) -> Callable[[], Any]:
        async def go() -> Any:
            async with wire.client() as client:
                target = make(client) if coro_fn in (ours_stream, ours_complete) else client
                arg = request if coro_fn in (ours_stream, ours_complete) else url
                return await coro_fn(target, arg, *extra)

        return go

    variants = [read_raw, by_hand, by_hand_fast, ours_stream, ours_complete]
    raw, hand, fast, stream, complete = median_times([with_client(v) for v in variants], args.runs)
    print(f"\n{name}: {mb:.1f} MB stream, {len(wire.chunks)} reads of {args.chunk} B")
    print(f"  {'':30}{'median s':>10}{'MB/s':>9}{'vs by hand':>12}{'vs fast':>9}")
    for label, t in (
        ("raw read (no parsing)", raw),
        ("by hand (split + json.loads)", hand),
        ("by hand (split + raw_decode)", fast),
        ("ours: stream() events", stream),
        ("ours: complete() assembled", complete),
    ):
        print(f"  {label:30}{t:10.4f}{mb / t:9.1f}{t / hand:11.2f}x{t / fast:8.2f}x")

    # First byte on the wire -> first TextDelta in the caller's hands.
    first_wire = Wire(data[: 4096 * 4], 4096)

    async def sample(fn: Callable[..., Any], n: int) -> list[float]:
        out = []
        async with first_wire.client() as client:
            provider = make(client)
            for _ in range(n):
                if fn is first_delta_latency:
                    out.append(await fn(provider, first_wire, request))
                else:
                    out.append(await fn(client, first_wire, url))
        return out

    n = args.latency_samples
    ours_lat = statistics.median(asyncio.run(sample(first_delta_latency, n)))
    raw_lat = statistics.median(asyncio.run(sample(first_chunk_latency, n)))
    print(
        f"  first byte -> first TextDelta: ours {ours_lat * 1e3:.3f} ms, raw first chunk "
        f"{raw_lat * 1e3:.3f} ms, our overhead {(ours_lat - raw_lat) * 1e3:.3f} ms "
        f"(median of {n})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=float, default=8.0)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--chunk", type=int, default=4096)
    parser.add_argument("--latency-samples", type=int, default=300)
    args = parser.parse_args()
    target = int(args.mb * 1e6)
    bench(
        "anthropic",
        anthropic_stream(target),
        lambda c: AnthropicProvider("m", api_key="k", base_url="http://bench", client=c),
        args,
    )
    bench(
        "openai",
        openai_stream(target),
        lambda c: OpenAIProvider("m", api_key="k", base_url="http://bench/v1", client=c),
        args,
    )


if __name__ == "__main__":
    main()
