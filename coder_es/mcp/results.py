"""An MCP ``CallToolResult`` as the text of an ordinary tool result.

Text blocks are kept as they are; images, audio and binary resources go to the blob store (the
output names them by digest, size and type); text resources keep their text under their URI;
structured content is added as JSON when no text block says the same. ``isError`` makes the
result an error result. The loop caps and stores the text like any tool output.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from coder_es.tools.base import ToolResult


def _blob(blobs: Any, data_b64: str, kind: str, mime: str) -> str:
    try:
        data = base64.b64decode(data_b64, validate=True)
    except (binascii.Error, ValueError):
        return f"[{kind} {mime}: invalid base64 data]"
    digest = blobs.put(data) if blobs is not None else "not stored"
    return f"[{kind} {mime}, {len(data)} bytes, blob {digest}]"


def render(result: Any, blobs: Any) -> ToolResult:
    """``result``: an ``mcp.types.CallToolResult``."""
    parts: list[str] = []
    texts: list[str] = []
    for block in result.content:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
            texts.append(block.text)
        elif kind in ("image", "audio"):
            parts.append(_blob(blobs, block.data, kind, block.mimeType))
        elif kind == "resource":
            res = block.resource
            mime = res.mimeType or "application/octet-stream"
            if hasattr(res, "text"):
                parts.append(f"[resource {res.uri}]\n{res.text}")
            else:
                parts.append(f"[resource {res.uri}] " + _blob(blobs, res.blob, "data", mime))
        elif kind == "resource_link":
            parts.append(f"[resource link {block.uri}: {block.name}]")
        else:
            parts.append(f"[{kind or 'unknown'} content]")
    structured = getattr(result, "structuredContent", None)
    if structured is not None:
        as_json = json.dumps(structured, ensure_ascii=True, sort_keys=True)
        if not any(json.dumps(_loads(t), sort_keys=True) == as_json for t in texts):
            parts.append(f"structured content: {as_json}")
    output = "\n".join(parts) if parts else "(no output)"
    return ToolResult(output, is_error=bool(result.isError))


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None
