"""Python import statements read straight from their text, when the text leaves no doubt.

The fast import pass (``parse.python_imports``) knows where each import statement starts. Almost
every such statement in real code is one of a few plain shapes (``import a.b as c, d``,
``from ..a import (b, c)  # note``); for those the text alone says what tree-sitter would, and
reading it with one anchored regular expression costs a fraction of a parse. The expressions
below accept only statements that are certainly well formed: ASCII identifiers that are not
keywords, no backslash continuations, no semicolons. Anything else, anywhere in a file, sends
the whole file back to the tree-sitter pass, so an odd file is parsed exactly as before.
"""

from __future__ import annotations

import keyword
import re

# Soft keywords (``match``, ``type``, ``print`` of old) are plain names to tree-sitter as to
# Python; only the hard ones make a statement malformed.
_KEYWORD = b"|".join(k.encode() for k in keyword.kwlist)
_ID = rb"(?!(?:" + _KEYWORD + rb")(?![A-Za-z0-9_]))[A-Za-z_][A-Za-z0-9_]*+"
_DOTTED = _ID + rb"(?:\." + _ID + rb")*+"
_AS = rb"(?:[ \t]+as[ \t]+" + _ID + rb")?"
_TAIL = rb"[ \t]*+(?:#[^\n]*+)?(?:\r?\n|\Z)"
# Inside parentheses newlines and comments are whitespace.
_PAREN_SPACE = rb"(?:[ \t\n]|\r\n|#[^\n]*+)*+"
_FROM_ITEM = _ID + _AS
_FROM_LIST = _FROM_ITEM + rb"(?:[ \t]*,[ \t]*" + _FROM_ITEM + rb")*+"
_FROM_PAREN = (
    _PAREN_SPACE
    + _FROM_ITEM
    + rb"(?:"
    + _PAREN_SPACE
    + rb","
    + _PAREN_SPACE
    + _FROM_ITEM
    + rb")*+(?:"
    + _PAREN_SPACE
    + rb",)?"
    + _PAREN_SPACE
)

_IMPORT = re.compile(
    rb"import[ \t]+(" + _DOTTED + _AS + rb"(?:[ \t]*,[ \t]*" + _DOTTED + _AS + rb")*+)" + _TAIL
)
_FROM = re.compile(
    rb"from(?:[ \t]+|(?=\.))(\.*+)[ \t]*("
    + _DOTTED
    + rb")?[ \t]+import(?:[ \t]*(\*)|[ \t]*\(("
    + _FROM_PAREN
    + rb")\)|[ \t]+("
    + _FROM_LIST
    + rb"))"
    + _TAIL
)
_COMMENT = re.compile(rb"#[^\n]*")


ImportKey = tuple[int, str, str, tuple[str, ...], int]
"""An ``Import``'s fields in order: tuples sort and deduplicate in C, dataclasses in Python."""

_Decoded = tuple[tuple[str, str, tuple[str, ...], int], ...]  # ImportKeys without the line


def plain_imports(data: bytes, starts: list[int]) -> list[ImportKey] | None:
    """The imports (as ``ImportKey``) of the statements starting at ``starts`` (ascending
    offsets of their first keyword), or None if any of them is not a plain, well-formed import
    statement."""
    found: list[ImportKey] = []
    line = 1
    counted = 0
    end = 0
    for start in starts:
        if start < end:
            return None  # a start inside the previous statement: leave it to the parser
        line += data.count(b"\n", counted, start)
        counted = start
        read = _statement(data, start)
        if read is None:
            return None
        end, decoded = read
        for fields in decoded:
            found.append((line, *fields))
    return found


def _statement(data: bytes, start: int) -> tuple[int, _Decoded] | None:
    """Where the plain statement at ``start`` ends, and what it imports; None if not plain."""
    if data.startswith(b"import", start):
        m = _IMPORT.match(data, start)
        if m is None:
            return None
        modules = [item.split()[0].decode() for item in m.group(1).split(b",")]
        return m.end(), tuple(("import", module, (), 0) for module in modules)
    m = _FROM.match(data, start)
    if m is None:
        return None
    dots, module, star, paren, listed = m.group(1, 2, 3, 4, 5)
    if module is None and not dots:
        return None  # ``from import x``
    if module == b"__future__" and not dots:
        return m.end(), ()  # a compiler directive (tree-sitter's future_import_statement)
    if star is not None:
        names: tuple[str, ...] = ("*",)
    else:
        text = listed if paren is None else _COMMENT.sub(b"", paren)
        names = tuple(sorted({w[0].decode() for p in text.split(b",") if (w := p.split())}))
    name = module.decode() if module is not None else ""
    return m.end(), (("from", name, names, len(dots)),)
