"""Plain-text output for the commands that must start fast (``sessions``): aligned columns with
no rich import, and text from a model or a user made safe for a terminal."""

from __future__ import annotations

import shutil
from collections.abc import Sequence


def printable(text: str) -> str:
    """``text`` with control characters (an escape sequence in a title) shown, not obeyed."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def columns(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned columns two spaces apart; the last column is cut to the terminal width."""
    cells = [[printable(c) for c in row] for row in [headers, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers) - 1)]
    width = shutil.get_terminal_size((120, 24)).columns
    lines = []
    for row in cells:
        head = "".join(c.ljust(w + 2) for c, w in zip(row, widths, strict=False))
        room = max(width - len(head), 10)
        last = row[-1] if len(row[-1]) <= room else row[-1][: room - 1] + "…"
        lines.append((head + last).rstrip())
    return lines
