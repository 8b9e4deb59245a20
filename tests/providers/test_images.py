"""Images in user messages: each provider sends them in its own wire form, byte for byte."""

from __future__ import annotations

import base64
import struct
import zlib
from typing import Any

import pytest
from provider_wire import FakeServer, Reply, Sleeps, request, run, sse_reply, wire

from coder_es.providers import (
    AnthropicProvider,
    OllamaProvider,
    OpenAIProvider,
    OpenAIResponsesProvider,
)
from coder_es.providers.images import (
    MAX_IMAGE_BYTES,
    ImageError,
    check_image,
    image_block,
    read_image_file,
    sniff_media_type,
    with_image_data,
)
from coder_es.providers.types import ModelRequest, canonical_request
from coder_es.store.blobs import MemoryBlobStore


def png(width: int = 1, height: int = 1) -> bytes:
    """A real PNG (one grey pixel row per line)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    rows = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


PNG = png()
B64 = base64.b64encode(PNG).decode("ascii")


def image_request() -> ModelRequest:
    blobs = MemoryBlobStore()
    block = image_block("image/png", blobs.put(PNG), len(PNG))
    content = [{"type": "text", "text": "What is in this picture?"}, block]
    stored = request(messages=[{"role": "user", "content": content}])
    return with_image_data(stored, blobs.get)


def test_anthropic_sends_a_base64_image_source() -> None:
    server = FakeServer(sse_reply(wire("anthropic/text.sse")))
    p = AnthropicProvider(
        "claude-sonnet-4-5", api_key="k", base_url="https://api.example.test",
        client=server.client(), sleep=Sleeps(), prompt_caching=False,
    )  # fmt: skip
    run(p.complete(image_request()))
    assert server.body()["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in this picture?"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": B64},
                },
            ],
        }
    ]


def test_openai_chat_sends_an_image_url_part_with_a_data_url() -> None:
    server = FakeServer(sse_reply(wire("openai/text.sse")))
    p = OpenAIProvider(
        "gpt-4.1", api_key="k", base_url="https://llm.example.test/v1",
        client=server.client(), sleep=Sleeps(),
    )  # fmt: skip
    run(p.complete(image_request()))
    assert server.body()["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in this picture?"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{B64}"}},
            ],
        }
    ]


def test_openai_responses_sends_an_input_image() -> None:
    server = FakeServer(sse_reply(wire("openai/responses_reasoning_tool.sse")))
    p = OpenAIResponsesProvider(
        "gpt-5", api_key="k", base_url="https://api.example.test/v1",
        client=server.client(), sleep=Sleeps(),
    )  # fmt: skip
    run(p.complete(image_request()))
    assert server.body()["input"] == [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "What is in this picture?"},
                {"type": "input_image", "image_url": f"data:image/png;base64,{B64}"},
            ],
        }
    ]


def test_ollama_puts_images_on_the_message() -> None:
    reply = Reply(200, [wire("ollama/text.ndjson")], {"content-type": "application/x-ndjson"})
    server = FakeServer(reply)
    p = OllamaProvider(
        "llava", base_url="http://ollama.test:11434", client=server.client(), sleep=Sleeps()
    )
    run(p.complete(image_request()))
    assert server.body()["messages"] == [
        {"role": "user", "content": "What is in this picture?", "images": [B64]}
    ]


def test_the_canonical_request_names_the_image_by_digest_not_by_its_bytes() -> None:
    sent = image_request()
    canonical: dict[str, Any] = canonical_request(sent)
    block = canonical["messages"][0]["content"][1]
    assert "data" not in block and block["blob"] and block["media_type"] == "image/png"
    assert B64 not in str(canonical)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (PNG, "image/png"),
        (b"\xff\xd8\xff\xe0\x00\x10JFIF\x00", "image/jpeg"),
        (b"GIF89a\x01\x00\x01\x00", "image/gif"),
        (b"GIF87a\x01\x00\x01\x00", "image/gif"),
        (b"RIFF\x24\x00\x00\x00WEBPVP8 ", "image/webp"),
        (b"RIFF\x24\x00\x00\x00WAVEfmt ", None),  # a RIFF file that is not WebP
        (b"%PDF-1.7\n", None),
        (b"", None),
    ],
)
def test_the_media_type_comes_from_the_bytes(data: bytes, expected: str | None) -> None:
    assert sniff_media_type(data) == expected


def test_a_too_large_or_non_image_file_is_refused_with_its_name(tmp_path: Any) -> None:
    big = tmp_path / "big.png"
    big.write_bytes(PNG + b"\0" * MAX_IMAGE_BYTES)
    with pytest.raises(ImageError, match=r"big\.png.*larger than"):
        read_image_file(str(big))
    text = tmp_path / "notes.png"  # the extension is not trusted
    text.write_text("hello")
    with pytest.raises(ImageError, match=r"notes\.png.*not a PNG, JPEG, GIF or WebP"):
        read_image_file(str(text))
    with pytest.raises(ImageError, match=r"missing\.png.*cannot read"):
        read_image_file(str(tmp_path / "missing.png"))
    assert check_image(PNG, "x") == "image/png"
