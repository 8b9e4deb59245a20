"""Finding the agent's ``old_string`` in the text it saw, exactly or tolerating whitespace.

Exact matches win. Failing that, the text is compared line by line ignoring line endings and
trailing whitespace, then ignoring indentation as well; an indentation-tolerant match re-indents
``new_string`` the way the file is indented. Zero or several matches are errors whose messages
show the agent what its view actually holds.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from coder_es.workspace.errors import WorkspaceError
from coder_es.workspace.text import split_lines


@dataclass(frozen=True, slots=True)
class Match:
    start: int  # character offsets in the text
    end: int
    new: str  # the replacement to put there (re-indented / re-terminated when tolerant)
    tolerant: bool


class MatchError(WorkspaceError):
    """``old_string`` matched zero or several times; the message is meant for the agent."""


def replace(text: str, old: str, new: str, *, replace_all: bool = False, path: str = "") -> str:
    """``text`` with ``old`` replaced by ``new`` (once, or everywhere with ``replace_all``)."""
    if old == new:
        msg = "old_string and new_string are the same: the edit would change nothing"
        raise MatchError(msg)
    if not old:
        msg = "old_string is empty: give the exact text to replace (or use write for a new file)"
        raise MatchError(msg)
    matches = find_matches(text, old, new)
    where = f" in {path}" if path else ""
    if not matches:
        raise MatchError(f"old_string was not found{where}. {_closest(text, old)}")
    if len(matches) > 1 and not replace_all:
        lines = ", ".join(str(_line_of(text, m.start)) for m in matches[:20])
        raise MatchError(
            f"old_string matches {len(matches)} places{where} (lines {lines}); add surrounding "
            "lines to make it unique, or set replace_all to change every one"
        )
    out = []
    pos = 0
    for m in matches:
        out.append(text[pos : m.start])
        out.append(m.new)
        pos = m.end
    out.append(text[pos:])
    return "".join(out)


def find_matches(text: str, old: str, new: str) -> list[Match]:
    exact = _exact(text, old, new)
    if exact:
        return exact
    if "\r\n" in text and "\r\n" not in old:
        crlf = _exact(text, old.replace("\n", "\r\n"), new.replace("\n", "\r\n"))
        if crlf:
            return crlf
    for strip_indent in (False, True):
        found = _by_lines(text, old, new, strip_indent=strip_indent)
        if found:
            return found
    return []


def _exact(text: str, old: str, new: str) -> list[Match]:
    matches = []
    pos = text.find(old)
    while pos >= 0:
        matches.append(Match(pos, pos + len(old), new, False))
        pos = text.find(old, pos + len(old))
    return matches


def _norm(line: str, strip_indent: bool) -> str:
    line = line.rstrip()  # also drops "\n" and "\r"
    return line.lstrip() if strip_indent else line


def _by_lines(text: str, old: str, new: str, *, strip_indent: bool) -> list[Match]:
    old_lines = [_norm(x, strip_indent) for x in split_lines(old)]
    while old_lines and not old_lines[-1]:
        old_lines.pop()
    while old_lines and not old_lines[0]:
        old_lines.pop(0)
    if not old_lines:
        return []
    lines = split_lines(text)
    normed = [_norm(x, strip_indent) for x in lines]
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    n = len(old_lines)
    matches: list[Match] = []
    i = 0
    while i + n <= len(lines):
        if normed[i : i + n] == old_lines:
            block = lines[i : i + n]
            start, end = offsets[i], offsets[i + n]
            matches.append(Match(start, end, _fit(new, old, block), True))
            i += n
        else:
            i += 1
    return matches


def _fit(new: str, old: str, block: list[str]) -> str:
    """``new`` shaped like the matched ``block``: its indentation, line endings and last newline."""
    eol = "\r\n" if block[0].endswith("\r\n") else "\n"
    # Which indentation of the agent's old lines became which indentation in the file.
    old_lines = [x for x in split_lines(old) if x.strip()]
    file_lines = [x for x in block if x.strip()]
    mapping = {_indent(o): _indent(f) for o, f in zip(old_lines, file_lines, strict=False)}
    prefixes = sorted(mapping, key=len, reverse=True)
    out = []
    for line in split_lines(new):
        body = line.rstrip("\r\n")
        if body.strip():
            indent = _indent(body)
            for p in prefixes:
                if indent.startswith(p):
                    body = mapping[p] + body[len(p) :]
                    break
        out.append(body + eol if line.endswith("\n") else body)
    result = "".join(out)
    # The block covers whole lines; keep its last newline, or its lack of one at the end of file.
    if block[-1].endswith("\n") and result and not result.endswith("\n"):
        result += eol
    elif not block[-1].endswith("\n") and result.endswith("\n"):
        result = result[: -len(eol)] if result.endswith(eol) else result[:-1]
    return result


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _closest(text: str, old: str) -> str:
    lines = split_lines(text)
    if not lines:
        return "The file is empty."
    first = next((x.strip() for x in split_lines(old) if x.strip()), "")
    stripped = [x.strip() for x in lines]
    best = difflib.get_close_matches(first, stripped, n=1, cutoff=0.5)
    if not best:
        return (
            f"Nothing similar either; the file has {len(lines)} lines as you last read it. "
            "Read it again before editing."
        )
    i = stripped.index(best[0])
    n_old = max(1, len(split_lines(old)))
    lo, hi = max(0, i - 1), min(len(lines), i + n_old + 1)
    shown = "".join(f"{k + 1:>6}\t{lines[k].rstrip()}\n" for k in range(lo, hi))
    return f"The most similar lines in the file as you last read it:\n{shown}"
