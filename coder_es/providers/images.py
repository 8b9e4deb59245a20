"""Images in user messages: the stored block, the media type sniffed from the bytes, the size limit.

A user message stores an image as ``{"type": "image", "media_type": str, "blob": sha256, "size":
int}``: the bytes live in the blob store, so events stay small and the audit trail, cassettes and
exports name the image by its digest. Just before a request leaves, ``with_image_data`` adds the
bytes as ``"data"`` (base64) from the blobs; each provider adapter turns that into its own wire
form (``wire_*`` below). ``canonical_request`` leaves ``data`` out (the digest already says which
image it is), so recorded requests stay small and replay compares them by digest.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from coder_es.errors import UsageError
from coder_es.providers.types import Block, ModelRequest

IMAGE_BLOCK = "image"
# Anthropic refuses an image whose base64 form is over 5 MiB ("image exceeds 5 MB maximum:
# 5272940 bytes > 5242880 bytes"), the strictest of the providers: 3.75 MiB of raw bytes.
MAX_IMAGE_BYTES = 5 * 1024 * 1024 * 3 // 4

_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)
MEDIA_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")


ImageInput = bytes | tuple[str, bytes]
"""An image given to a session: its bytes, or ``(declared media type, bytes)``."""


class ImageError(UsageError):
    """An image the user gave cannot be sent: unreadable, not an image, or too large."""


def sniff_media_type(data: bytes) -> str | None:
    """The media type the bytes really are (png, jpeg, gif, webp), or None. The file name's
    extension is not trusted: a provider rejects an image whose declared type is wrong."""
    for signature, media_type in _SIGNATURES:
        if data.startswith(signature):
            return media_type
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def check_image(data: bytes, where: str) -> str:
    """The media type of ``data``, or an ``ImageError`` naming ``where`` (a path or a label)."""
    if len(data) > MAX_IMAGE_BYTES:
        raise ImageError(
            f"{where}: image is larger than the {MAX_IMAGE_BYTES} bytes (5 MiB as base64) "
            "providers accept; scale it down first"
        )
    media_type = sniff_media_type(data)
    if media_type is None:
        raise ImageError(f"{where}: not a PNG, JPEG, GIF or WebP image")
    return media_type


def read_image_file(path: str) -> bytes:
    """The bytes of the image file at ``path``, checked (``ImageError`` names the path)."""
    shown = repr(path)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_IMAGE_BYTES + 1)
    except OSError as e:
        raise ImageError(f"{shown}: cannot read the image: {e.strerror or e}") from e
    check_image(data, shown)
    return data


def check_images(images: Sequence[ImageInput]) -> list[tuple[str, bytes]]:
    """(sniffed media type, bytes) for each image, or an ``ImageError`` naming the first bad one."""
    checked = []
    for i, image in enumerate(images, 1):
        data = image[1] if isinstance(image, tuple) else image
        checked.append((check_image(data, f"image {i}"), data))
    return checked


def image_block(media_type: str, digest: str, size: int) -> Block:
    """The block a user message stores for an image whose bytes are blob ``digest``."""
    return {"type": IMAGE_BLOCK, "media_type": media_type, "blob": digest, "size": size}


def is_image(block: Block) -> bool:
    return block.get("type") == IMAGE_BLOCK and isinstance(block.get("blob"), str)


def with_image_data(request: ModelRequest, load: Callable[[str], bytes]) -> ModelRequest:
    """``request`` with every image block's bytes attached as base64 ``data`` (from ``load``)."""
    lists = [m["content"] for m in request.messages if isinstance(m["content"], list)]
    if not any(is_image(b) for content in lists for b in content):
        return request
    messages = []
    for message in request.messages:
        content = message["content"]
        if isinstance(content, list):
            content = [
                {**b, "data": base64.b64encode(load(b["blob"])).decode("ascii")}
                if is_image(b) and "data" not in b
                else b
                for b in content
            ]
        messages.append({**message, "content": content})
    return dataclasses.replace(request, messages=messages)


def _data(block: Block) -> str:
    data = block.get("data")
    if not isinstance(data, str):
        raise ValueError(f"image blob {block.get('blob')} was not attached to the request")
    return data


def wire_anthropic(block: Block) -> dict[str, Any]:
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": block["media_type"], "data": _data(block)},
    }


def data_url(block: Block) -> str:
    return f"data:{block['media_type']};base64,{_data(block)}"


def wire_openai_chat(block: Block) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": data_url(block)}}


def wire_openai_responses(block: Block) -> dict[str, Any]:
    return {"type": "input_image", "image_url": data_url(block)}


def wire_ollama(block: Block) -> str:
    return _data(block)
