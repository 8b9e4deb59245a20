"""A guard in front of the ``acp`` package's stdio transport: only JSON-RPC objects get through.

The package reads newline-delimited JSON from an ``asyncio.StreamReader`` and assumes every line
is an object: a batch array, ``42``, ``null`` or ``"str"`` raised inside its receive loop and
ended the process (and every open session with it), and a malformed line was dropped without the
``-32700`` answer JSON-RPC 2.0 requires. We do not patch the package: ``LineGuard`` reads stdin
itself, answers every line that is not a request, notification or response with the error the
spec names (``-32700`` parse error, ``-32600`` invalid request, both with ``"id": null``), and
feeds only the valid lines to the reader the package is given.

Batches are answered with one ``-32600``: the package has no batch support, and the spec allows a
server to treat one as an invalid request rather than silently dropping it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

log = logging.getLogger(__name__)

PARSE_ERROR = -32700
INVALID_REQUEST = -32600


def _error(code: int, message: str, detail: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": code, "message": message, "data": {"details": detail}},
    }


def _valid_id(value: object) -> bool:
    # Strings, integers and null; a bool is a Python int but not a JSON-RPC id.
    return (
        value is None
        or isinstance(value, str)
        or (isinstance(value, int) and not isinstance(value, bool))
    )


def invalid_request_reason(message: object) -> str | None:
    """Why ``message`` (decoded JSON) is not a JSON-RPC 2.0 request, notification or response;
    None when it is one."""
    if isinstance(message, list):
        return "batch requests are not supported; send one request per line"
    if not isinstance(message, dict):
        return f"a message must be a JSON object, got {type(message).__name__}"
    if message.get("jsonrpc") != "2.0":
        return 'a message must carry "jsonrpc": "2.0"'
    if "id" in message and not _valid_id(message["id"]):
        return "the id must be a string, an integer or null"
    if "method" in message:
        if not isinstance(message["method"], str) or not message["method"]:
            return "the method must be a non-empty string"
        params = message.get("params")
        if params is not None and not isinstance(params, dict | list):
            return "params must be an object or an array"
        return None
    if "id" in message and ("result" in message) != ("error" in message):
        return None  # a response to one of our requests
    return "a message needs a method (a request) or an id with a result or an error (a response)"


def check_line(line: bytes) -> dict[str, Any] | None:
    """The error response for one line of input, or None when the line may pass."""
    try:
        message = json.loads(line)
    except (ValueError, RecursionError) as e:
        # ValueError covers bad JSON and bytes that are not UTF-8; RecursionError a line of
        # thousands of nested brackets.
        detail = "nested too deeply" if isinstance(e, RecursionError) else str(e)
        return _error(PARSE_ERROR, "Parse error", detail)
    reason = invalid_request_reason(message)
    return None if reason is None else _error(INVALID_REQUEST, "Invalid Request", reason)


class LineGuard:
    """Reads ``source`` line by line; valid lines go to ``reader`` (hand it to the package),
    invalid ones are answered on ``writer``. Run ``pump()`` as a task."""

    def __init__(
        self, source: asyncio.StreamReader, writer: asyncio.StreamWriter, *, limit: int
    ) -> None:
        self.source = source
        self.writer = writer
        self.reader = asyncio.StreamReader(limit=limit)

    async def _read_line(self) -> bytes:
        chunks: list[bytes] = []
        try:
            while True:
                try:
                    chunks.append(await self.source.readuntil(b"\n"))
                    return b"".join(chunks)
                except asyncio.LimitOverrunError as e:
                    chunks.append(await self.source.readexactly(e.consumed))
        except asyncio.IncompleteReadError as e:
            chunks.append(e.partial)
            return b"".join(chunks)

    async def pump(self) -> None:
        try:
            while True:
                line = await self._read_line()
                if not line:
                    return
                if not line.strip():
                    continue
                error = check_line(line)
                if error is None:
                    self.reader.feed_data(line if line.endswith(b"\n") else line + b"\n")
                    continue
                log.warning("refused a line of input: %s", error["error"]["data"]["details"])
                # One write per message, like the package's own sender: lines never interleave.
                self.writer.write((json.dumps(error) + "\n").encode())
                await self.writer.drain()
        finally:
            self.reader.feed_eof()


class ProtocolErrorsOnOneLine(logging.Filter):
    """The package logs a notification it cannot route (an unknown method: JSON-RPC sends no
    answer to a notification) with ``logging.exception`` on the root logger. That is the
    client's mistake, not ours: one line, no traceback. Other exceptions keep theirs."""

    def filter(self, record: logging.LogRecord) -> bool:
        from acp import RequestError

        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, RequestError):
            record.msg = f"{record.getMessage()}: {error}"
            record.args = ()
            record.exc_info = None
        return True
