"""Search from the client surfaces (ACP ``session/list``, WebSocket ``search``): the same index
as ``coder-es search``, caught up with the log first."""

from __future__ import annotations

from typing import Any

from coder_es.application import CoderApp
from coder_es.clients.errors import ClientError
from coder_es.errors import UsageError

MAX_HITS = 200


def search_hits(
    app: CoderApp,
    text: Any,
    *,
    session: str | None = None,
    kind: Any = None,
    limit: Any = 20,
) -> list[dict[str, Any]]:
    """The hits as the CLI's ``--json`` objects; a bad argument is a ``ClientError``."""
    from projections.search import Filters, open_index, search

    if not isinstance(text, str):
        raise ClientError("search needs a string 'query'")
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_HITS:
        raise ClientError(f"'limit' must be an integer from 1 to {MAX_HITS}")
    if kind is not None and not isinstance(kind, str):
        raise ClientError("'kind' must be a string")
    try:
        filters = Filters(session=session, kind=kind, limit=limit)
        index = open_index(app)
        try:
            hits = search(app, index, text, filters)
        finally:
            index.close()
    except UsageError as e:
        raise ClientError(str(e), "bad_query") from None
    return [h.to_dict() for h in hits]


def sessions_matching(app: CoderApp, text: Any) -> dict[str, list[dict[str, Any]]]:
    """Session id -> its hits, best session first (the order of its best hit)."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for hit in search_hits(app, text, limit=MAX_HITS):
        grouped.setdefault(str(hit["session"]), []).append(hit)
    return grouped
