"""Which redaction rules can match a buffer at all, found without holding the GIL.

The exact rules are Python regular expressions, and Python's ``re`` (like ``bytes.find``, the
keyword prefilter) holds the GIL for the whole scan: scanning a 4 MB file took ~60 ms during
which no other thread ran, so reads of one response could not overlap (issue 21). RE2
(google-re2) releases the GIL while it searches and needs one pass for many patterns.

Each builtin and environment rule gets a SHAPE: its regular expression with the lookarounds
removed (an assertion only ever narrows a match) and Python's bytes-only spellings rewritten, so
every place the rule matches, its shape matches too. One RE2 search for all shapes answers the
common case (nothing looks like a secret: no rule can match); when it finds something, one search
per shape says which rules to run exactly. A rule whose shape cannot be vouched for (a construct
RE2 reads differently, or does not read) has none and always runs, as do user patterns: their
syntax is the user's, and a rewrite that widened them wrongly would let a secret through.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

_LOOKAROUNDS = ("(?=", "(?!", "(?<=", "(?<!")
# Python's ``\s`` on bytes is [ \t\n\v\f\r]; RE2's leaves out \v, so it is spelled out.
_SPACE = "\\t-\\r "


def re2_shape(pattern: str) -> str:
    """``pattern`` (a Python regular expression, applied to bytes) without its lookarounds and
    anchors, in RE2's syntax: it matches wherever ``pattern`` does (and maybe elsewhere).
    ValueError when that cannot be vouched for."""
    out: list[str] = []
    i = 0
    in_class = False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            out.append(_escape(pattern[i : i + 2], in_class))
            i += 2
        elif in_class:
            if pattern.startswith("[:", i):
                raise ValueError("'[:' in a class is a POSIX class in RE2, two characters here")
            in_class = c != "]"
            out.append(c)
            i += 1
        elif c == "[":
            in_class = True
            end = i + 1
            end += pattern[end : end + 1] == "^"
            end += pattern[end : end + 1] == "]"  # a leading ] is a member, in both
            out.append(pattern[i:end])
            i = end
        elif pattern.startswith(_LOOKAROUNDS, i):
            i = _group_end(pattern, i)
            if pattern[i : i + 1] in ("*", "+", "?", "{"):
                raise ValueError("a quantified lookaround")
        elif c in "^$":
            i += 1  # anchors only narrow (and Python's $ also matches before a final newline)
        elif pattern.startswith("{,", i):
            out.append("{0,")  # Python's {,n}; RE2 reads "{,n}" as those characters
            i += 2
        else:
            out.append(c)
            i += 1
    if in_class:
        raise ValueError("an unterminated class")
    return "".join(out)


def _escape(escape: str, in_class: bool) -> str:
    if escape == "\\s":
        return _SPACE if in_class else f"[{_SPACE}]"
    letter = escape[1:]
    # Back-references and octal, \S (RE2's differs by \v), \Z, \b in a class (a backspace in
    # Python), names and code points: not carried over.
    if not letter or letter.isdigit() or letter in "SZNuUg" or (letter == "b" and in_class):
        raise ValueError(f"the escape {escape!r}")
    return escape


def _group_end(pattern: str, start: int) -> int:
    """The index just after the group opening at ``start``."""
    depth = 0
    in_class = False
    i = start
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            i += pattern[i + 1 : i + 2] == "^"
            i += pattern[i + 1 : i + 2] == "]"
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ValueError("an unbalanced group")


class ShapeFilter:
    """The shapes of a redactor's rules, compiled for RE2 (bytes, byte by byte)."""

    def __init__(self, shapes: Sequence[str | None]) -> None:
        import re2  # loaded with the first scan of bytes, not at start-up

        options = re2.Options()
        options.encoding = re2.Options.Encoding.LATIN1  # a byte is a character, as in re
        options.never_capture = True
        options.log_errors = False

        def compiled(shape: str) -> Any | None:
            try:
                return re2.compile(shape.encode("utf-8", "surrogateescape"), options)
            except re2.error:
                return None

        self._each = [None if s is None else compiled(s) for s in shapes]
        usable = [s for s, c in zip(shapes, self._each, strict=True) if c is not None]
        self._any = compiled("|".join(f"(?:{s})" for s in usable)) if usable else None

    def screen(self, data: bytes) -> Callable[[int], bool]:
        """Whether rule ``i`` can match somewhere in ``data`` (always for a rule without a
        usable shape). One search for all shapes now; a rule's own search, when asked (a scan
        that stops at the first secret asks only up to it). RE2 releases the GIL meanwhile."""
        each = self._each
        if self._any is not None and self._any.search(data) is None:
            return lambda i: each[i] is None

        def may_match(i: int) -> bool:
            shape = each[i]
            return shape is None or shape.search(data) is not None

        return may_match

    def possible(self, data: bytes) -> list[bool]:
        """``screen`` for every rule."""
        may = self.screen(data)
        return [may(i) for i in range(len(self._each))]
