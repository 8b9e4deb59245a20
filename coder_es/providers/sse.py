"""Incremental decoders for the two streaming framings: Server-Sent Events and NDJSON.

Both take bytes in whatever pieces the network delivers (a frame or a line may be split anywhere,
even between ``\\r`` and ``\\n``) and yield complete frames only. ``close()`` reports a stream that
stopped in the middle of a frame, so truncation is never mistaken for a clean end.
"""

from __future__ import annotations

from dataclasses import dataclass

from coder_es.providers.errors import StreamProtocolError

# A single line larger than this is a broken or hostile server, not a model response.
MAX_LINE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class SSEFrame:
    event: str
    data: bytes
    id: str | None = None


class SSEDecoder:
    """The WHATWG event-stream parsing rules, on bytes."""

    __slots__ = ("_buf", "_data", "_event", "_id", "_seen_field", "_started")

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[bytes] = []
        self._event = b""
        self._id: bytes | None = None
        self._seen_field = False
        self._started = False

    def feed(self, chunk: bytes) -> list[SSEFrame]:
        if not self._started:
            if not chunk:
                return []
            self._started = True
            if chunk.startswith(b"\xef\xbb\xbf"):
                chunk = chunk[3:]
        buf = self._buf + chunk if self._buf else chunk
        lines = buf.splitlines(keepends=True)
        if not lines:
            return []
        last = lines[-1]
        # A line ending in a lone "\r" may be the first half of "\r\n": keep it until the next
        # chunk shows whether a "\n" follows, or else "\n" would count as an extra blank line.
        if last.endswith(b"\n"):
            self._buf = b""
        else:
            self._buf = lines.pop()
            if len(self._buf) > MAX_LINE_BYTES:
                raise StreamProtocolError(f"SSE line longer than {MAX_LINE_BYTES} bytes")
        frames: list[SSEFrame] = []
        for line in lines:
            frame = self._line(line.rstrip(b"\r\n"))
            if frame is not None:
                frames.append(frame)
        return frames

    def _line(self, line: bytes) -> SSEFrame | None:
        if not line:
            return self._dispatch()
        if line[0] == 0x3A:  # ":" starts a comment (keep-alives)
            return None
        name, sep, value = line.partition(b":")
        if sep and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value)
        elif name == b"event":
            self._event = value
        elif name == b"id":
            if b"\0" not in value:
                self._id = value
        # "retry" and unknown fields are ignored, as the spec says.
        self._seen_field = True
        return None

    def _dispatch(self) -> SSEFrame | None:
        if not self._seen_field:
            return None
        data, event = self._data, self._event
        self._data, self._event, self._seen_field = [], b"", False
        if not data:
            return None
        return SSEFrame(
            event=event.decode("utf-8", "replace") if event else "message",
            data=data[0] if len(data) == 1 else b"\n".join(data),
            id=self._id.decode("utf-8", "replace") if self._id is not None else None,
        )

    def close(self) -> list[SSEFrame]:
        """Flush at end of stream. A frame without its terminating blank line is dispatched if
        complete lines made it up (many servers omit the final blank line); a partial line is not.
        """
        frames: list[SSEFrame] = []
        if self._buf:
            tail, self._buf = self._buf, b""
            if tail.endswith(b"\r"):
                frame = self._line(tail.rstrip(b"\r"))
                if frame is not None:
                    frames.append(frame)
            else:
                raise StreamProtocolError(
                    f"stream ended in the middle of a line: {tail[:80]!r}"
                )
        frame = self._dispatch()
        if frame is not None:
            frames.append(frame)
        return frames


class NDJSONDecoder:
    """Newline-delimited JSON: yields each complete non-blank line (still undecoded)."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        buf = self._buf + chunk if self._buf else chunk
        lines = buf.split(b"\n")
        self._buf = lines.pop()
        if len(self._buf) > MAX_LINE_BYTES:
            raise StreamProtocolError(f"NDJSON line longer than {MAX_LINE_BYTES} bytes")
        return [s for line in lines if (s := line.strip())]

    def close(self) -> list[bytes]:
        tail, self._buf = self._buf.strip(), b""
        # Ollama ends every object with "\n"; a missing one means the body was cut off, but a
        # complete object is still a complete object, so let the JSON decoder decide.
        return [tail] if tail else []
