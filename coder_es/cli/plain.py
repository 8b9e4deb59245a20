"""Plain-text output for the commands that must start fast (``sessions``, ``tree``): aligned
columns with no rich import, text from a model or a user made safe for a terminal, and lines
printed exactly as rich prints them when rich would print them without colour.

``tree`` prints through rich (colours, the terminal's width). When the output is not a terminal,
rich writes plain text, each line cut to the width with an ellipsis, and its import and per-line
rendering are most of the command's time: ``rich_plain_width`` says when that is the case (the
conservative side of rich's own decision: anything unusual is left to rich) and ``cut_lines``
produces rich's text with rich's own cell-width functions (tests/core/test_plain_lines.py
compares the two for hostile text).
"""

from __future__ import annotations

import builtins
import os
import shutil
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import TextIO


def printable(text: str) -> str:
    """``text`` with control characters (an escape sequence in a title) shown, not obeyed."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def columns(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned columns two spaces apart; on a terminal the last column is cut to its width."""
    cells = [[printable(c) for c in row] for row in [headers, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers) - 1)]
    # A pipe or a file gets whole lines: a program reads them, not a person at some width.
    width = shutil.get_terminal_size((120, 24)).columns if sys.stdout.isatty() else None
    lines = []
    for row in cells:
        head = "".join(c.ljust(w + 2) for c, w in zip(row, widths, strict=False))
        room = max(width - len(head), 10) if width is not None else len(row[-1])
        last = row[-1] if len(row[-1]) <= room else row[-1][: room - 1] + "…"
        lines.append((head + last).rstrip())
    return lines


# rich.control.STRIP_CONTROL_CODES (bell, backspace, vertical tab, form feed, carriage return):
# rich drops them from every text it prints (a test checks the copy).
STRIPPED_CONTROLS = (7, 8, 11, 12, 13)
_STRIP = dict.fromkeys(STRIPPED_CONTROLS)


def rich_plain_width(stream: TextIO, environ: Mapping[str, str] = os.environ) -> int | None:
    """The width rich's ``Console()`` would cut lines to when it writes ``stream`` without any
    colour or style (not a terminal); None when rich would style the output, or in any case
    this does not follow (then rich prints)."""
    if sys.platform == "win32" or hasattr(builtins, "get_ipython"):
        return None  # legacy Windows consoles, notebooks: rich's own business
    if "FORCE_COLOR" in environ or "TTY_COMPATIBLE" in environ:
        return None
    try:
        if stream.isatty():
            return None
    except (AttributeError, ValueError):
        return None
    columns = environ.get("COLUMNS")
    if columns is not None and columns.isdigit():
        if not (columns.isascii() and int(columns) > 0):
            return None
        return int(columns)
    # Like rich: the first of standard input, output and error that is a terminal, else 80.
    for fd in (0, 1, 2):
        try:
            width = os.get_terminal_size(fd).columns
        except (AttributeError, ValueError, OSError):
            continue
        return width or 80
    return 80


def shown_by_markup(text: str) -> str:
    """What rich shows for ``rich.markup.escape(text)`` at the end of a line: ``escape`` adds a
    backslash to a text that ends in exactly one, and with no tag after it nothing takes it away
    again (a tag after it would). The same text, so that both ways print the same."""
    return text + "\\" if text.endswith("\\") and not text.endswith("\\\\") else text


def cut_lines(texts: Iterable[str], width: int) -> list[str] | None:
    """``texts`` as rich prints them with ``no_wrap=True, overflow="ellipsis"`` at ``width``
    without colour: control codes dropped, split at newlines, each line longer than ``width``
    cells cut to ``width - 1`` cells and an ellipsis. None for text holding a tab (rich expands
    tabs by cell position: left to rich)."""
    out: list[str] = []
    for text in texts:
        if "\t" in text:
            return None
        for line in text.translate(_STRIP).split("\n"):
            # A character is at most two cells wide: a line of up to width / 2 characters fits
            # without measuring it (the uncut output of a pipe never imports rich).
            if len(line) * 2 > width and _cells(line) > width:
                from rich.cells import set_cell_size

                line = set_cell_size(line, width - 1) + "…"
            out.append(line)
    return out


def _cells(line: str) -> int:
    from rich.cells import cell_len  # small, unlike rich.console

    return cell_len(line)
