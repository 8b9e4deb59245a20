"""Regular expressions a user (or a trusted project) supplies, compiled with RE2.

A redaction pattern runs on everything coder-es records: every message, tool output and file
read. Python's ``re`` backtracks, so a pattern such as ``(x+x+)+y`` takes exponential time on a
40-character line of ``x`` and hangs the turn. RE2 (google-re2) matches in time linear in the
text, whatever the pattern; in exchange it has no backreferences and no lookarounds, and a
pattern using them is refused with one clear message when the configuration is read.

Matching is done in UTF-8 (a ``.`` is one character; bytes that are not UTF-8 never match).
"""

from __future__ import annotations

import functools
import re
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")


class UserPatternError(ValueError):
    """The pattern cannot be compiled by RE2; the message says why."""


@functools.cache
def _options() -> Any:
    import re2

    options = re2.Options()
    options.log_errors = False  # the error is raised (and reported once), not also logged
    return options


@functools.cache
def compile_user_pattern(pattern: str) -> tuple[Any, Any]:
    """The RE2 programs of ``pattern`` for text and for bytes. Raises UserPatternError."""
    import re2

    try:
        text = re2.compile(pattern, _options())
        raw = re2.compile(pattern.encode("utf-8", "surrogateescape"), _options())
    except re2.error as e:
        why = e.args[0] if e.args else e
        why = why.decode("utf-8", "replace") if isinstance(why, bytes) else str(why)
        msg = (
            f"RE2 cannot compile it ({why}); patterns use RE2 syntax, which matches in linear "
            "time: no backreferences, no lookarounds"
        )
        raise UserPatternError(msg) from None
    except (TypeError, UnicodeEncodeError) as e:
        raise UserPatternError(f"RE2 cannot compile it ({e})") from None
    return text, raw


def searchable(text: str) -> str:
    """``text`` as RE2 can take it: lone surrogates (undecodable bytes of a file name kept by
    ``surrogateescape``) become U+FFFD, one character for one, so offsets stay the same."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text
