"""Standard input and output as asyncio streams, whatever they are: pipes, terminals, sockets, or
plain files (``coder-es acp < requests.jsonl > out.jsonl``).

asyncio's pipe transports refuse regular files ("Pipe transport is only for pipes, sockets and
character devices"), which is what the ACP package's ``stdio_streams`` uses. A regular file never
blocks on read or write, so it is read by a thread that feeds the reader and written directly.
"""

from __future__ import annotations

import asyncio
import os
import stat
import sys
import threading
from asyncio.streams import FlowControlMixin
from typing import Any, cast

from acp.stdio import stdio_streams


def is_regular_file(fd: int) -> bool:
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError:
        return False


class _FileTransport(asyncio.WriteTransport):
    """Writes straight to a regular file (no event-loop watching: a file is always writable)."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd = fd
        self._closing = False

    def write(self, data: Any) -> None:
        view = memoryview(bytes(data))
        while view and not self._closing:
            view = view[os.write(self._fd, view) :]

    def can_write_eof(self) -> bool:
        return False

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        self._closing = True


def _feed_from_thread(
    loop: asyncio.AbstractEventLoop, reader: asyncio.StreamReader, fd: int
) -> None:
    def read_all() -> None:
        try:
            while chunk := os.read(fd, 1 << 16):
                loop.call_soon_threadsafe(reader.feed_data, chunk)
        finally:
            loop.call_soon_threadsafe(reader.feed_eof)

    threading.Thread(target=read_all, name="stdin-file", daemon=True).start()


async def any_stdio_streams(limit: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """``acp.stdio.stdio_streams`` where stdin and stdout are pipes or terminals; a thread reader
    or a direct writer for whichever of them is a regular file."""
    stdin_file, stdout_file = is_regular_file(0), is_regular_file(1)
    if not stdin_file and not stdout_file:
        return await stdio_streams(limit=limit)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limit)
    if stdin_file:
        _feed_from_thread(loop, reader, sys.stdin.fileno())
    else:
        protocol = asyncio.StreamReaderProtocol(reader)
        await loop.connect_read_pipe(lambda: protocol, sys.stdin)
    # asyncio's own flow control for a stream writer (a file never pauses it; a pipe may).
    write_protocol = FlowControlMixin(loop)
    if stdout_file:
        sys.stdout.flush()
        transport: asyncio.WriteTransport = _FileTransport(sys.stdout.fileno())
    else:
        pipe, _ = await loop.connect_write_pipe(lambda: write_protocol, sys.stdout)
        transport = cast(asyncio.WriteTransport, pipe)
    writer = asyncio.StreamWriter(transport, write_protocol, None, loop)
    return reader, writer
