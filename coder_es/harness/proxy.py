"""The recording proxy: the harness's only model endpoint, on 127.0.0.1, for one turn.

The harness is pointed at ``http://127.0.0.1:PORT/<token>`` (its base URL). Each request whose
path starts with the token is forwarded to the upstream base URL (the user's own, or the
provider's default) with its headers, the answer is streamed back byte for byte as it arrives,
and the exchange is kept: the request (method, path without the token and without secret query
parameters, an allow-list of headers, the body) and the response (status, an allow-list of
headers, the raw body). A request without the token is refused (403) and never forwarded: the
port is open to every local process, the token is only in the harness's environment.

Credentials travel (the upstream needs them) but are never kept: only allow-listed headers are
recorded, and query parameters other than an allow-list are dropped from the recorded path
(Gemini may send its key as ``?key=``).

A later mode serves recorded responses instead of forwarding (replay, fork): ``Upstream`` is
the one seam for that (``ForwardUpstream`` today).

The HTTP/1.1 server is small on purpose (asyncio streams): the clients are the three CLIs'
HTTP stacks, which send ``Content-Length`` or chunked bodies and keep connections alive; its
per-request cost is what ``bench/harness.py`` measures.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import parse_qsl, urlencode, urlsplit

# Headers kept in the record: what a replay needs to tell requests apart, nothing secret.
RECORDED_REQUEST_HEADERS = frozenset(
    {"content-type", "accept", "anthropic-version", "anthropic-beta", "openai-beta", "user-agent"}
)
RECORDED_RESPONSE_HEADERS = frozenset(
    {"content-type", "content-encoding", "request-id", "x-request-id", "openai-processing-ms"}
)
RECORDED_QUERY = frozenset({"alt", "beta"})
# Never forwarded either way (connection-level, or rewritten by us).
_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te", "host"}
)
CONNECT_FAILURES_LIMIT = 3


@dataclass(frozen=True)
class Exchange:
    """One model request and its answer, as recorded (no credentials)."""

    method: str
    path: str
    request_headers: dict[str, str]
    request_body: bytes
    status: int
    response_headers: dict[str, str]
    response_body: bytes
    started: float  # time.time() when the request arrived
    duration_ms: float
    error: str | None = None


class UpstreamResponse(Protocol):
    status: int
    headers: list[tuple[str, str]]

    def body(self) -> AsyncIterator[bytes]: ...

    async def aclose(self) -> None: ...


class Upstream(Protocol):
    async def send(
        self, method: str, path: str, headers: list[tuple[str, str]], body: bytes
    ) -> UpstreamResponse: ...

    async def aclose(self) -> None: ...


class UpstreamError(Exception):
    """The upstream failed mid-exchange (a broken or malformed answer)."""


class UpstreamConnectError(UpstreamError):
    """The upstream could not be reached at all."""


class _Response:
    def __init__(
        self,
        upstream: ForwardUpstream,
        conn: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        status: int,
        headers: list[tuple[str, str]],
        head_request: bool,
    ) -> None:
        self._up = upstream
        self._conn = conn
        self.status = status
        self.headers = headers
        lower = {k.lower(): v.lower() for k, v in headers}
        self._chunked = "chunked" in lower.get("transfer-encoding", "")
        length = lower.get("content-length")
        self._length = int(length) if length and length.isdigit() else None
        if head_request or status in (204, 304) or 100 <= status < 200:
            self._length = 0
        self._reusable = lower.get("connection") != "close" and (
            self._chunked or self._length is not None
        )
        self._done = False

    async def body(self) -> AsyncIterator[bytes]:
        reader = self._conn[0]
        read = self._up.read_timeout_s
        try:
            if self._chunked:
                while True:
                    line = await asyncio.wait_for(reader.readline(), read)
                    size = int(line.split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                            pass
                        break
                    yield await asyncio.wait_for(reader.readexactly(size), read)
                    await reader.readline()
            elif self._length is not None:
                left = self._length
                while left > 0:
                    chunk = await asyncio.wait_for(reader.read(min(left, 65536)), read)
                    if not chunk:
                        raise UpstreamError("the model endpoint closed the answer early")
                    left -= len(chunk)
                    yield chunk
            else:
                while chunk := await asyncio.wait_for(reader.read(65536), read):
                    yield chunk
            self._done = True
        except (ValueError, asyncio.IncompleteReadError, TimeoutError, OSError) as e:
            raise UpstreamError(f"{type(e).__name__}: {e}") from e

    async def aclose(self) -> None:
        if self._done and self._reusable:
            self._up.release(self._conn)
        else:
            self._conn[1].close()


class ForwardUpstream:
    """Forwards to ``base_url`` (its path prefixed to the request's) over HTTP/1.1, keeping
    connections alive. Plain asyncio streams (TLS for https): the proxy's cost per request is
    what the bench measures, and a general-purpose client costs a millisecond more each."""

    def __init__(
        self, base_url: str, *, connect_timeout_s: float = 10.0, read_timeout_s: float = 600.0
    ) -> None:
        self.base_url = base_url.rstrip("/")
        parts = urlsplit(self.base_url)
        self._tls = parts.scheme == "https"
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or (443 if self._tls else 80)
        self._prefix = parts.path
        self._host_header = parts.netloc
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        while self._idle:
            reader, writer = self._idle.pop()
            if not writer.is_closing() and not reader.at_eof():
                return reader, writer
            writer.close()
        context = None
        if self._tls:
            import ssl

            import certifi

            context = ssl.create_default_context(cafile=certifi.where())
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(self._host, self._port, ssl=context, limit=1 << 20),
                self.connect_timeout_s,
            )
        except (OSError, TimeoutError) as e:
            raise UpstreamConnectError(str(e) or type(e).__name__) from e
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return reader, writer

    def release(self, conn: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> None:
        self._idle.append(conn)

    async def send(
        self, method: str, path: str, headers: list[tuple[str, str]], body: bytes
    ) -> UpstreamResponse:
        head = [f"{method} {self._prefix}{path} HTTP/1.1", f"Host: {self._host_header}"]
        head += [f"{k}: {v}" for k, v in headers if k.lower() != "host"]
        head.append(f"Content-Length: {len(body)}")
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        for attempt in (0, 1):
            reused = bool(self._idle)
            reader, writer = await self._connect()
            try:
                writer.write(data)
                await writer.drain()
                line = await asyncio.wait_for(reader.readline(), self.read_timeout_s)
                if not line:
                    raise ConnectionResetError("closed")
                status = int(line.split(b" ", 2)[1])
                response_headers: list[tuple[str, str]] = []
                while True:
                    h = await asyncio.wait_for(reader.readline(), self.read_timeout_s)
                    if h in (b"\r\n", b"\n", b""):
                        break
                    name, _, value = h.decode("latin-1").partition(":")
                    response_headers.append((name.strip(), value.strip()))
            except (OSError, ValueError, IndexError, TimeoutError) as e:
                writer.close()
                if reused and attempt == 0:
                    continue  # a kept-alive connection the server had closed: once more, anew
                raise UpstreamError(f"{type(e).__name__}: {e}") from e
            return _Response(self, (reader, writer), status, response_headers, method == "HEAD")
        raise UpstreamError("unreachable")  # pragma: no cover

    async def aclose(self) -> None:
        for _, writer in self._idle:
            writer.close()
        self._idle.clear()


class ModelUnreachable(Exception):
    """The upstream failed ``CONNECT_FAILURES_LIMIT`` requests in a row (refused, or dropped
    before any answer)."""


@dataclass
class RecordingProxy:
    upstream: Upstream
    routes: dict[str, Upstream] = field(default_factory=dict)
    """More upstreams, by the path segment after the token that selects them (an ACP agent of
    unknown provider gets one base URL per provider, each a route of the same proxy)."""
    on_exchange: Callable[[Exchange], None] | None = None
    token: str = field(default_factory=lambda: secrets.token_urlsafe(18))
    exchanges: list[Exchange] = field(default_factory=list)
    unreachable: asyncio.Event = field(default_factory=asyncio.Event)
    unreachable_reason: str = ""
    _server: asyncio.Server | None = None
    _connect_failures: int = 0
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _unix: asyncio.Server | None = None
    local: dict[str, Callable[[bytes], Awaitable[tuple[int, bytes]]]] = field(default_factory=dict)
    """Paths (after the token) coder-es answers itself, never forwarded nor recorded as model
    traffic (Claude Code's permission prompts: ``coder_es.harness.approve``)."""

    async def start(self, host: str = "127.0.0.1") -> RecordingProxy:
        self._server = await asyncio.start_server(self._serve, host, 0, limit=1 << 20)
        return self

    async def listen_unix(self, path: str) -> None:
        """Serve on a Unix socket too (a sandbox without network reaches the proxy there)."""
        self._unix = await asyncio.start_unix_server(self._serve, path, limit=1 << 20)

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def base_url(self) -> str:
        """What the harness is given as its base URL (the token is the first path segment)."""
        return f"http://127.0.0.1:{self.port}/{self.token}"

    def route_url(self, route: str) -> str:
        return f"{self.base_url}/{route}"

    async def aclose(self) -> None:
        if self._unix is not None:
            self._unix.close()
            self._unix = None
        if self._server is not None:
            self._server.close()
            for w in list(self._writers):
                w.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
            self._server = None
        await self.upstream.aclose()
        for upstream in self.routes.values():
            await upstream.aclose()

    # ------------------------------------------------------------------ serving

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:
            # The proxy closes (the turn ended or was cancelled): asyncio's stream callback
            # would report a handler that ends cancelled as an unhandled error.
            pass
        finally:
            if task is not None:
                self._tasks.discard(task)
            self._writers.discard(writer)
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        line = await reader.readline()
        if not line:
            return False
        started, t0 = time.time(), time.perf_counter()
        try:
            method, target, _version = line.decode("latin-1").rstrip("\r\n").split(" ", 2)
        except ValueError:
            await _respond(writer, 400, b"bad request line")
            return False
        headers: list[tuple[str, str]] = []
        while True:
            h = await reader.readline()
            if h in (b"\r\n", b"\n", b""):
                break
            name, _, value = h.decode("latin-1").partition(":")
            headers.append((name.strip(), value.strip()))
        lower = {k.lower(): v for k, v in headers}
        if lower.get("transfer-encoding", "").lower() == "chunked":
            body = await _read_chunked(reader)
        else:
            body = await reader.readexactly(int(lower.get("content-length") or 0))
        keep = lower.get("connection", "").lower() != "close"
        prefix = f"/{self.token}"
        if not (
            target == prefix or target.startswith(prefix + "/") or target.startswith(prefix + "?")
        ):
            await _respond(writer, 403, b"not this proxy's harness")
            return keep
        path = target[len(prefix) :] or "/"
        handler = self.local.get(path.split("?")[0])
        if handler is not None:
            status, answer = await handler(body) if method == "POST" else (405, b"")
            writer.write(
                f"HTTP/1.1 {status} {_reason(status)}\r\ncontent-type: application/json\r\n"
                f"content-length: {len(answer)}\r\n\r\n".encode()
                + answer
            )
            await writer.drain()
            return keep
        forward = [
            (k, v) for k, v in headers if k.lower() not in _HOP and k.lower() != "content-length"
        ]
        upstream = self.upstream
        if self.routes:
            segment, _, rest = path[1:].partition("/")
            if segment in self.routes:
                upstream, path = self.routes[segment], "/" + rest
        try:
            response = await upstream.send(method, path, forward, body)
        except UpstreamError as e:
            # Not reached, or no answer at all (the connection dropped before a status line):
            # the harness would retry for minutes; after a few in a row the turn ends instead.
            self._connect_failures += 1
            where = getattr(upstream, "base_url", "")
            if isinstance(e, UpstreamConnectError):
                reason = f"the model endpoint {where} cannot be reached ({e or type(e).__name__})"
            else:
                reason = f"the model endpoint {where} gives no answer ({e})"
            if self._connect_failures >= CONNECT_FAILURES_LIMIT:
                self.unreachable_reason = reason
                self.unreachable.set()
            await _respond(writer, 502, reason.encode())
            self._record(method, path, headers, body, 502, [], b"", started, t0, reason)
            return keep
        self._connect_failures = 0
        chunks: list[bytes] = []
        error = None
        try:
            out = [f"HTTP/1.1 {response.status} {_reason(response.status)}\r\n".encode()]
            length = None
            for k, v in response.headers:
                kl = k.lower()
                if kl in _HOP:
                    continue
                if kl == "content-length":
                    length = v
                out.append(f"{k}: {v}\r\n".encode("latin-1"))
            chunked = length is None
            if chunked:
                out.append(b"transfer-encoding: chunked\r\n")
            out.append(b"\r\n")
            writer.write(b"".join(out))
            async for chunk in response.body():
                if not chunk:
                    continue
                chunks.append(chunk)
                writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
                await writer.drain()
            if chunked:
                writer.write(b"0\r\n\r\n")
            await writer.drain()
        except (UpstreamError, ConnectionError) as e:
            error = f"the stream broke ({type(e).__name__}: {e})"
            keep = False
        finally:
            await response.aclose()
            self._record(
                method,
                path,
                headers,
                body,
                response.status,
                response.headers,
                b"".join(chunks),
                started,
                t0,
                error,
            )
        return keep

    def _record(
        self,
        method: str,
        path: str,
        headers: list[tuple[str, str]],
        body: bytes,
        status: int,
        response_headers: list[tuple[str, str]],
        response_body: bytes,
        started: float,
        t0: float,
        error: str | None,
    ) -> None:
        exchange = Exchange(
            method=method,
            path=_recorded_path(path),
            request_headers={
                k.lower(): v for k, v in headers if k.lower() in RECORDED_REQUEST_HEADERS
            },
            request_body=body,
            status=status,
            response_headers={
                k.lower(): v for k, v in response_headers if k.lower() in RECORDED_RESPONSE_HEADERS
            },
            response_body=response_body,
            started=started,
            duration_ms=(time.perf_counter() - t0) * 1000,
            error=error,
        )
        self.exchanges.append(exchange)
        if self.on_exchange is not None:
            self.on_exchange(exchange)


def _recorded_path(path: str) -> str:
    parts = urlsplit(path)
    query = [
        (k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k in RECORDED_QUERY
    ]
    return parts.path + (f"?{urlencode(query)}" if query else "")


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    out = bytearray()
    while True:
        size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
        if size == 0:
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass
            return bytes(out)
        out += await reader.readexactly(size)
        await reader.readline()


async def _respond(writer: asyncio.StreamWriter, status: int, body: bytes) -> None:
    writer.write(
        f"HTTP/1.1 {status} {_reason(status)}\r\ncontent-type: text/plain\r\n"
        f"content-length: {len(body)}\r\n\r\n".encode()
        + body
    )
    await writer.drain()


def _reason(status: int) -> str:
    from http import HTTPStatus

    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Status"
