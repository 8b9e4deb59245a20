"""A search query as the user types it, made safe for each engine.

Plain words and "quoted phrases"; every one must occur (AND). Nothing the user types is query
syntax: FTS5 operators (AND, OR, NOT, NEAR, ``*``, ``^``, ``:``, parentheses) and PostgreSQL
tsquery characters are just text, so no input can make a search fail. A quote left open runs to
the end of the query.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from coder_es.errors import UsageError
from projections.search.documents import KINDS, MARK_END, MARK_START

DEFAULT_LIMIT = 20
WINDOW = 10_000
"""Documents (the most recent) both engines rank first, widened while fewer hits than asked are
found (PostgreSQL 8x at a time; an FTS5 block back to the match that makes enough). Ranking
every match of a word present in half a million documents costs ~100x more, and a query that
common is refined, not read to the end."""
_PIECE = re.compile(r'"([^"]*)"?|(\S+)')
# What both engines keep as a token: letters and digits (FTS5's unicode61 tokenizer splits on
# everything else, underscores included; the PostgreSQL column is built the same way).
_WORD_CHARS = re.compile(r"[^\W_]+")


@dataclass(frozen=True)
class Query:
    phrases: tuple[tuple[str, ...], ...]
    """Each phrase as its tokens; a plain word is a phrase of one token."""

    @classmethod
    def parse(cls, text: str) -> Query:
        phrases: list[tuple[str, ...]] = []
        for quoted, word in _PIECE.findall(text):
            tokens = tuple(_WORD_CHARS.findall(quoted if quoted else word))
            if tokens:
                phrases.append(tokens)
        return cls(tuple(phrases))

    @property
    def empty(self) -> bool:
        return not self.phrases

    def fts5(self) -> str:
        """An FTS5 MATCH expression: every phrase quoted, so nothing in it is an operator."""
        return " AND ".join('"' + " ".join(p).replace('"', '""') + '"' for p in self.phrases)

    def terms(self) -> list[str]:
        """The phrases as plain strings (PostgreSQL: one ``phraseto_tsquery`` each)."""
        return [" ".join(p) for p in self.phrases]


@dataclass(frozen=True)
class Filters:
    session: str | None = None
    kind: str | None = None
    since: float | None = None
    """Seconds since the epoch."""
    limit: int = DEFAULT_LIMIT

    def __post_init__(self) -> None:
        if self.kind is not None and self.kind not in KINDS:
            msg = f"unknown kind {self.kind!r}; choose one of {', '.join(KINDS)}"
            raise UsageError(msg)
        if self.limit < 1:
            raise UsageError("the limit must be at least 1")


def parse_since(text: str) -> float:
    """``2026-11-01`` or ``2026-11-01T12:00`` (local time unless an offset is given)."""
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        msg = f"cannot read the date {text!r}; write it like 2026-11-01 or 2026-11-01T12:00"
        raise UsageError(msg) from None
    return (when if when.tzinfo else when.astimezone()).timestamp()


SNIPPET_CHARS = 240


def _window(text: str, marks: list[tuple[int, int]]) -> tuple[str, tuple[tuple[int, int], ...]]:
    """At most ``SNIPPET_CHARS`` of ``text`` around its first mark (a token can be huge: a
    minified line, a base64 blob), with the marks moved to match."""
    if len(text) <= SNIPPET_CHARS:
        return text, tuple(marks)
    first = marks[0][0] if marks else 0
    start = max(0, min(first - SNIPPET_CHARS // 3, len(text) - SNIPPET_CHARS))
    end = start + SNIPPET_CHARS
    kept = tuple(
        (max(s, start) - start, min(e, end) - start) for s, e in marks if s < end and e > start
    )
    return ("…" if start else "") + text[start:end] + ("…" if end < len(text) else ""), tuple(
        (s + (1 if start else 0), e + (1 if start else 0)) for s, e in kept
    )


@dataclass(frozen=True)
class Hit:
    session: str
    node: str
    kind: str
    version: int
    timestamp: float
    snippet: str
    marks: tuple[tuple[int, int], ...] = field(default=())
    """Where the matches are in ``snippet`` (start, end offsets)."""
    score: float = 0.0
    """Higher is better (FTS5: minus bm25; PostgreSQL: ts_rank_cd)."""

    @classmethod
    def marked(cls, raw: str, **fields: object) -> Hit:
        """From an engine's snippet whose matches sit between ``MARK_START`` and ``MARK_END``."""
        plain: list[str] = []
        marks: list[tuple[int, int]] = []
        at = 0
        start = -1
        for ch in raw:
            if ch == MARK_START:
                start = at
            elif ch == MARK_END:
                if start >= 0:
                    marks.append((start, at))
                start = -1
            else:
                plain.append(ch)
                at += 1
        text, kept = _window("".join(plain), marks)
        return cls(snippet=text, marks=kept, **fields)  # type: ignore[arg-type]

    def highlighted(self, before: str = ">>", after: str = "<<") -> str:
        out, last = [], 0
        for s, e in self.marks:
            out += [self.snippet[last:s], before, self.snippet[s:e], after]
            last = e
        out.append(self.snippet[last:])
        return "".join(out)

    def to_dict(self) -> dict[str, object]:
        return {
            "session": self.session,
            "node": self.node,
            "kind": self.kind,
            "version": self.version,
            "timestamp": datetime.fromtimestamp(self.timestamp).astimezone().isoformat(),
            "snippet": self.snippet,
            "marks": [list(m) for m in self.marks],
            "score": round(self.score, 6),
        }
