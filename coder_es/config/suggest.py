"""'Did you mean' hints for misspelt keys, names and models."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def close_matches(word: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    """Up to ``n`` candidates close to ``word``, best first. Case is ignored when comparing, so
    ``Permissions`` still finds ``permissions``."""
    pool = list(dict.fromkeys(candidates))
    by_lower: dict[str, str] = {}
    for c in pool:
        by_lower.setdefault(c.lower(), c)
    hits = difflib.get_close_matches(word.lower(), list(by_lower), n=n, cutoff=0.6)
    return [by_lower[h] for h in hits]


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` (or ``'x' or 'y'``), or ``""`` when nothing is close."""
    hits = close_matches(word, candidates)
    if not hits:
        return ""
    quoted = [f"'{h}'" for h in hits]
    joined = quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]
    return f"; did you mean {joined}?"
