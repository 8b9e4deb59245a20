"""Test helpers: a fake server on httpx.MockTransport that plays recorded wire bytes in pieces."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx

from coder_es.providers import ModelRequest, StreamEvent

WIRE = Path(__file__).resolve().parents[2] / "fixtures" / "wire"

T = TypeVar("T")


def run(coro: Awaitable[T]) -> T:
    async def main() -> T:
        return await coro

    return asyncio.run(main())


def wire(name: str) -> bytes:
    return (WIRE / name).read_bytes()


def crlf(data: bytes) -> bytes:
    return data.replace(b"\n", b"\r\n")


def split_every(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def split_at(data: bytes, positions: Iterable[int]) -> list[bytes]:
    cuts = sorted({p for p in positions if 0 < p < len(data)})
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


@dataclass
class Reply:
    status: int = 200
    chunks: Sequence[bytes] = ()
    headers: dict[str, str] = field(default_factory=dict)
    # Awaited after the chunks: lets a test hold the connection open (never set = hang).
    hang: asyncio.Event | None = None
    closed: list[bool] = field(default_factory=list)


class FakeServer:
    """Answers each request with the next ``Reply``; keeps every request for inspection."""

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies)
        self.requests: list[httpx.Request] = []

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if not self.replies:
            raise AssertionError(f"unexpected request {request.method} {request.url}")
        reply = self.replies.pop(0)

        async def body() -> AsyncIterator[bytes]:
            try:
                for chunk in reply.chunks:
                    await asyncio.sleep(0)
                    yield chunk
                if reply.hang is not None:
                    await reply.hang.wait()
            finally:
                reply.closed.append(True)

        return httpx.Response(reply.status, headers=reply.headers, content=body())

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(self.handler))

    def body(self, n: int = -1) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.requests[n].content)
        return result


def sse_reply(data: bytes, pieces: int | Sequence[int] = 7, **headers: str) -> Reply:
    chunks = split_every(data, pieces) if isinstance(pieces, int) else split_at(data, pieces)
    return Reply(200, chunks, {"content-type": "text/event-stream", **headers})


def json_reply(status: int, data: bytes, **headers: str) -> Reply:
    return Reply(status, [data], {"content-type": "application/json", **headers})


class Sleeps:
    """An injectable sleep that records delays instead of waiting."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


def request(**kw: Any) -> ModelRequest:
    base: dict[str, Any] = {
        "model": "test-model",
        "messages": [{"role": "user", "content": "Hello"}],
    }
    base.update(kw)
    return ModelRequest(**base)


async def collect(stream: AsyncIterator[StreamEvent]) -> list[StreamEvent]:
    return [e async for e in stream]


async def collect_until_error(
    stream: AsyncIterator[StreamEvent],
) -> tuple[list[StreamEvent], BaseException | None]:
    events: list[StreamEvent] = []
    try:
        async for e in stream:
            events.append(e)
    except Exception as e:
        return events, e
    return events, None


Handler = Callable[[httpx.Request], httpx.Response]
