"""Token counts without a tokenizer: a deterministic estimate, pluggable.

No model weights or tokenizer files are downloaded. The default estimate is one token per four
bytes of UTF-8 (rounded up): BPE tokenizers of current models average three to four and a half
bytes a token on English and source code, so bytes/4 errs a little high on code and low on
dense non-Latin text. ``word_piece_tokens`` is a second estimate (words split into pieces of at
most four characters, every punctuation mark a token) that tracks tokenizers better on code
full of symbols, at about ten times the cost. Anything with the ``TokenCounter`` signature can
replace them (``ContextConfig.counter``), a real tokenizer included.

The token count of a request is defined piecewise so that it can be maintained incrementally:
the system prompt, the tool definitions (as canonical JSON), and per message a fixed overhead
plus the sum of its blocks (each block a fixed overhead plus its text). Merging two messages
therefore saves exactly one message overhead, and a part's count never depends on its
neighbours. ``request_tokens`` is the reference: the context builder's figures equal it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from coder_es.domain.chain import canonical_json
from coder_es.providers.types import Message, ModelRequest

TokenCounter = Callable[[str], int]

MESSAGE_OVERHEAD = 4
"""Role markers and separators around a message."""
BLOCK_OVERHEAD = 2
"""Block boundaries (and a tool call's id)."""
IMAGE_TOKENS = 1600
"""What one image costs (the most Anthropic bills for one it does not scale down)."""


def estimate_tokens(text: str) -> int:
    """Bytes of UTF-8 over four, rounded up (the default counter)."""
    if text.isascii():
        return (len(text) + 3) // 4
    return (len(text.encode("utf-8", "surrogatepass")) + 3) // 4


_PIECES = re.compile(r"\w+|[^\w\s]", re.UNICODE)


def word_piece_tokens(text: str) -> int:
    """Words cut into pieces of up to four characters, each symbol a token of its own."""
    total = 0
    for match in _PIECES.finditer(text):
        total += (len(match.group()) + 3) // 4
    return total


def block_tokens(block: dict[str, Any], count: TokenCounter) -> int:
    kind = block.get("type")
    if kind == "text":
        return BLOCK_OVERHEAD + count(str(block.get("text", "")))
    if kind == "tool_use":
        return (
            BLOCK_OVERHEAD
            + count(str(block.get("name", "")))
            + count(canonical_json(block.get("input", {})))
        )
    if kind == "tool_result":
        content = block.get("content", "")
        text = content if isinstance(content, str) else canonical_json(content)
        return BLOCK_OVERHEAD + count(text)
    if kind == "thinking":
        return BLOCK_OVERHEAD + count(str(block.get("thinking", "")))
    if kind == "image":
        # Providers bill an image by its pixels, not by its base64 text.
        return BLOCK_OVERHEAD + IMAGE_TOKENS
    # Blocks kept verbatim (redacted thinking, server tools): their JSON is what is sent.
    return BLOCK_OVERHEAD + count(canonical_json(block))


def blocks_tokens(blocks: Sequence[dict[str, Any]], count: TokenCounter) -> int:
    return sum(block_tokens(b, count) for b in blocks)


def message_tokens(message: Message, count: TokenCounter) -> int:
    content = message["content"]
    if isinstance(content, str):
        return MESSAGE_OVERHEAD + (BLOCK_OVERHEAD + count(content) if content else 0)
    return MESSAGE_OVERHEAD + blocks_tokens(content, count)


def tools_tokens(tools: Sequence[dict[str, Any]], count: TokenCounter) -> int:
    return count(canonical_json(list(tools))) if tools else 0


def request_tokens(request: ModelRequest, count: TokenCounter = estimate_tokens) -> int:
    """The input tokens of ``request`` as this module defines them (see the module docstring)."""
    return (
        count(request.system)
        + tools_tokens(request.tools, count)
        + sum(message_tokens(m, count) for m in request.messages)
    )


def fit_text(text: str, max_tokens: int, count: TokenCounter, note: Callable[[int], str]) -> str:
    """``text`` itself if it fits ``max_tokens``, else its head and tail around ``note(omitted)``.

    Two thirds of the room go to the head and one third to the tail (the end of a test run or a
    log is often what matters). The result fits ``max_tokens`` under any counter that grows
    with the text; when even the note does not fit, the result is empty.
    """
    if count(text) <= max_tokens:
        return text
    # A first guess from the bytes/4 rule, then halve until the counter agrees.
    keep = max(0, max_tokens * 4 - len(note(len(text))) - 8)
    while True:
        head_len = keep * 2 // 3
        tail_len = keep - head_len
        omitted = len(text) - head_len - tail_len
        tail = text[len(text) - tail_len :] if tail_len else ""
        candidate = text[:head_len] + note(omitted) + tail
        if count(candidate) <= max_tokens:
            return candidate
        if keep == 0:
            return ""
        keep //= 2
