"""A window of a file's lines, without splitting the whole file.

``read`` shows up to 2000 lines of a file that may hold a hundred thousand; splitting all of them
(``str.splitlines``) held the GIL for 13-24 ms per 4 MB file, which kept the reads of one response
from overlapping (issue 21). The window is ``text.splitlines()[start:start + count]`` exactly, and
the total is ``len(text.splitlines())``: where the file breaks lines only on ``\\n``, the total is
counted on the bytes and only the lines up to the window are split; where it holds any other break
``splitlines`` knows (``\\r``, form feed, ``\\x1c``-``\\x1e``, NEL, U+2028/9), the whole file is
split as before.
"""

from __future__ import annotations

from functools import cache
from typing import Any

# The breaks str.splitlines honours besides \n, as UTF-8 bytes (\x0b is \v, \x0c is \f).
_OTHER_BREAKS = rb"[\r\x0b\x0c\x1c-\x1e]|\xc2\x85|\xe2\x80[\xa8\xa9]"
_ASCII_BREAKS = (b"\r", b"\x0b", b"\x0c", b"\x1c", b"\x1d", b"\x1e")


@cache
def _other_breaks() -> Any:
    import re2  # loaded on first use, not at start-up

    options = re2.Options()
    options.encoding = re2.Options.Encoding.LATIN1
    options.never_capture = True
    return re2.compile(_OTHER_BREAKS, options)


def _breaks_only_on_newlines(data: bytes) -> bool:
    # One memchr per ASCII break; the UTF-8 ones only where there is UTF-8 (RE2's search of them
    # is ~10x the cost of a memchr, but it releases the GIL; bytes.find of them does not).
    if any(brk in data for brk in _ASCII_BREAKS):
        return False
    return data.isascii() or _other_breaks().search(data) is None


def line_window(data: bytes, text: str, start: int, count: int) -> tuple[list[str], int]:
    """``(text.splitlines()[start:start + count], len(text.splitlines()))``, where ``text`` is
    ``data`` decoded from UTF-8."""
    if not _breaks_only_on_newlines(data):
        lines = text.splitlines()
        return lines[start : start + count], len(lines)
    total = data.count(b"\n") + (not data.endswith(b"\n") and len(data) > 0)
    head = text.split("\n", start + count)
    # Past the window's end the last piece is the rest of the file; a file ending with \n also
    # leaves an empty last piece, which splitlines does not count as a line.
    del head[start + count :]
    if len(head) > total:
        head.pop()
    return head[start:], total
