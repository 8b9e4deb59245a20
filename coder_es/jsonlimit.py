"""JSON from outside files (cassettes, exports, witnesses, journals), with a nesting limit.

``json.loads`` of ``[[[[...`` thousands deep raises ``RecursionError`` (a traceback), and a value
just under the interpreter's limit breaks the first recursive code that walks it later. Input from
files is therefore refused past ``MAX_DEPTH`` levels with a ``JsonDepthError`` (a ``ValueError``,
as a malformed document is), which each reader turns into its own one-line message.

The check costs nothing for ordinary documents: a value cannot be deeper than the number of
brackets in its text, which ``str.count`` tells at C speed; only a text with more brackets than the
limit has its parsed value walked (iteratively).
"""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 200
"""Far deeper than anything coder-es writes; far from the interpreter's recursion limit."""


class JsonDepthError(ValueError):
    def __init__(self, max_depth: int) -> None:
        super().__init__(f"JSON nested deeper than {max_depth} levels")


def loads(text: str | bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads`` refusing values nested deeper than ``max_depth``."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise JsonDepthError(max_depth) from None
    if _brackets(text) > max_depth:
        check_depth(value, max_depth)
    return value


def check_depth(value: Any, max_depth: int = MAX_DEPTH) -> None:
    """Raise ``JsonDepthError`` when ``value`` (parsed JSON) nests deeper than ``max_depth``."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > max_depth:
            raise JsonDepthError(max_depth)
        stack.extend((child, depth + 1) for child in children)


def _brackets(text: str | bytes) -> int:
    if isinstance(text, str):
        return text.count("[") + text.count("{")
    return text.count(b"[") + text.count(b"{")
