"""Line numbers for TOML keys.

``tomllib`` returns plain dicts without positions, so error messages would name a key but not
where it is. This scanner reads the same text line by line and records the line of every table
header and ``key = value`` line under its full key path. It is approximate on purpose (it does
not look inside inline tables or multi-line values): a key it cannot place is reported at its
closest enclosing key that it can.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

_BARE = re.compile(r"[A-Za-z0-9_-]+")


def _parse_key(s: str, i: int) -> tuple[tuple[str, ...], int] | None:
    """A dotted key starting at ``s[i]``: its parts and the index after it, or None."""
    parts: list[str] = []
    n = len(s)
    while True:
        while i < n and s[i] in " \t":
            i += 1
        if i >= n:
            return None
        if s[i] == '"':
            j = i + 1
            while j < n and s[j] != '"':
                j += 2 if s[j] == "\\" else 1
            if j >= n:
                return None
            try:
                parts.append(json.loads(s[i : j + 1]))
            except ValueError:
                parts.append(s[i + 1 : j])
            i = j + 1
        elif s[i] == "'":
            j = s.find("'", i + 1)
            if j < 0:
                return None
            parts.append(s[i + 1 : j])
            i = j + 1
        else:
            m = _BARE.match(s, i)
            if not m:
                return None
            parts.append(m.group())
            i = m.end()
        while i < n and s[i] in " \t":
            i += 1
        if i < n and s[i] == ".":
            i += 1
            continue
        return tuple(parts), i


def key_lines(text: str) -> dict[tuple[str, ...], int]:
    """The 1-based line of each table header and key in ``text`` (first occurrence wins)."""
    lines: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    open_quote: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if open_quote is not None:
            if open_quote in line:
                open_quote = None
            continue
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        if s.startswith("["):
            double = s.startswith("[[")
            parsed = _parse_key(s, 2 if double else 1)
            if parsed is None:
                continue
            keys, end = parsed
            if s.startswith("]]" if double else "]", end):
                table = keys
                for k in range(1, len(keys) + 1):
                    lines.setdefault(keys[:k], number)
            continue
        parsed = _parse_key(s, 0)
        if parsed is None:
            continue
        keys, end = parsed
        if not s.startswith("=", end):
            continue
        full = table + keys
        for k in range(len(table) + 1, len(full) + 1):
            lines.setdefault(full[:k], number)
        value = s[end + 1 :]
        for quote in ('"""', "'''"):
            if value.count(quote) % 2 == 1:
                open_quote = quote
                break
    return lines


def locate(lines: dict[tuple[str, ...], int], path: Sequence[str | int]) -> int | None:
    """The line of ``path``, or of its closest enclosing key that has one."""
    keys = tuple(p for p in path if isinstance(p, str))
    for k in range(len(keys), 0, -1):
        if keys[:k] in lines:
            return lines[keys[:k]]
    return None
