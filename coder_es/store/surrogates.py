"""Lone surrogates in JSON text, written as their escapes: what the store's transcoder and the
event chain's canonical JSON both need (here, in the store, the lower of the two)."""

from __future__ import annotations

import re

_SURROGATE = re.compile("[\ud800-\udfff]")


def escape_surrogates(json_text: str) -> str:
    """JSON text with every lone surrogate written as its ``\\uXXXX`` escape.

    File names that are not valid UTF-8 are carried as ``str`` with surrogate escapes
    (``os.fsdecode``: byte 0xE9 becomes U+DCE9), so they can reach JSON. A lone surrogate cannot be
    encoded as UTF-8; its JSON escape can, and ``json.loads`` gives the same ``str`` back
    (``os.fsencode`` then gives the original bytes). Text without surrogates is returned
    unchanged, so every hash computed before this existed stays the same.
    """
    if json_text.isascii():
        return json_text
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", json_text)
