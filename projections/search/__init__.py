"""Full-text search across every session of a store (``coder-es search``, ACP, WebSocket).

A projection of the notification log: ``documents`` (what an event makes searchable), ``query``
(what the user typed, made safe), ``index`` (catch-up, rebuild, the engine for a backend),
``sqlite_index`` (FTS5) and ``postgres_index`` (tsvector + GIN, kept by the projection process).
"""

from projections.search.documents import KINDS, Doc, documents
from projections.search.index import catch_up, open_index, pending, rebuild, search
from projections.search.query import Filters, Hit, Query, parse_since

__all__ = [
    "KINDS",
    "Doc",
    "Filters",
    "Hit",
    "Query",
    "catch_up",
    "documents",
    "open_index",
    "parse_since",
    "pending",
    "rebuild",
    "search",
]
