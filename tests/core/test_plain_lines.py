"""``coder_es.cli.plain``: lines printed exactly as rich prints them when rich would print them
without colour (``tree`` skips importing rich for output that is not a terminal)."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator

import pytest
from rich.console import Console
from rich.control import STRIP_CONTROL_CODES
from rich.markup import escape

from coder_es.cli.plain import STRIPPED_CONTROLS, cut_lines, rich_plain_width, shown_by_markup

HOSTILE = [
    "",
    "plain words",
    "[bold]not markup[/bold] [link=http://x]y[/link] [/]",
    "a trailing backslash \\",
    "two trailing backslashes \\\\",
    "\\[escaped?] \\\\[double] [b\\]",
    "wide 中文字符 and emoji 🎉🎉 " * 4,
    "bell\x07 backspace\x08 vt\x0b ff\x0c cr\x0d esc\x1b[31m kept",
    "a file name\nwith a newline",
    "trailing newline\n",
    "x" * 300,
    "combining e\u0301\u0301 zero\u200bwidth",
]


@pytest.fixture
def pipe() -> Iterator[io.TextIOWrapper]:
    """A stream that is not a terminal, as stdout is under a pipe."""
    read, write = os.pipe()
    os.close(read)
    with open(write, "w", encoding="utf-8") as stream:
        yield stream


def rich_prints(texts: list[str], width: int) -> str:
    out = io.StringIO()
    console = Console(file=out, width=width, highlight=False, emoji=False, color_system=None)
    console.print("\n".join(escape(t) for t in texts), no_wrap=True, overflow="ellipsis")
    return out.getvalue()


@pytest.mark.parametrize("width", [1, 2, 5, 17, 40, 80, 200])
def test_lines_are_cut_as_rich_cuts_them(width: int) -> None:
    for text in HOSTILE:
        ours = cut_lines([shown_by_markup(text)], width)
        assert ours is not None
        assert "".join(f"{line}\n" for line in ours) == rich_prints([text], width), repr(text)
    together = cut_lines([shown_by_markup(text) for text in HOSTILE], width)
    assert together is not None
    assert "".join(f"{line}\n" for line in together) == rich_prints(HOSTILE, width)


def test_a_tab_is_left_to_rich() -> None:
    assert cut_lines(["a\tb"], 80) is None


def test_the_stripped_controls_are_richs() -> None:
    assert tuple(STRIPPED_CONTROLS) == tuple(STRIP_CONTROL_CODES)


@pytest.mark.parametrize(
    "environ",
    [{}, {"COLUMNS": "37"}, {"COLUMNS": "abc"}, {"LINES": "10"}, {"COLUMNS": "120", "LINES": "9"}],
)
def test_the_width_is_richs_when_rich_would_not_colour(
    environ: dict[str, str], pipe: io.TextIOWrapper
) -> None:
    console = Console(file=pipe, _environ=environ)
    assert console.color_system is None  # what makes the output plain
    assert rich_plain_width(pipe, environ) == console.width


@pytest.mark.parametrize(
    "environ",
    [{"FORCE_COLOR": "1"}, {"FORCE_COLOR": ""}, {"TTY_COMPATIBLE": "1"}, {"COLUMNS": "0"}],
)
def test_anything_unusual_is_left_to_rich(environ: dict[str, str], pipe: io.TextIOWrapper) -> None:
    assert rich_plain_width(pipe, environ) is None


def test_a_terminal_is_left_to_rich() -> None:
    pty = pytest.importorskip("pty")
    leader, follower = pty.openpty()
    try:
        with open(follower, "w", closefd=False) as terminal:
            assert rich_plain_width(terminal, {}) is None
    finally:
        os.close(leader)
        os.close(follower)
