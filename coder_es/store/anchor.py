"""The anchor: a witness of each session's head, kept beside the events.

A hash chain shows every modified, reordered, inserted or deleted event except one thing: if the
LAST events of a session are removed, what remains is still a valid chain. The anchor closes that
gap: per session it records the highest version seen intact and that event's chain hash, in the
view store (``app.views``) under ``audit-anchor:<session id>``. ``verify`` then reports a session
whose events stop before the anchored version (truncated) or whose event at the anchored version
hashes differently (rewritten).

The anchor is a witness, not the source of truth. It only moves forward, and it is advanced when a
session is verified intact or exported, and by ``advance_after_save`` (which the application calls
after saving a session). It lives in the same store, so someone able to rewrite the store can
rewrite it too: for evidence that survives that, keep a head hash elsewhere. Every export carries
its own head hash, and ``verify --json`` prints each session's head.

Unlike the other view records, anchors are not rebuildable from the events (that is their point):
deleting them only loses the truncation check for events recorded before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from coder_es.store.views import ViewRecord, ViewStore

PREFIX = "audit-anchor:"
INDEX_KEY = "audit-anchor-index"


@dataclass(frozen=True)
class Anchor:
    session: str
    version: int
    head: str
    source: str = "anchor"
    """Who witnessed it: the in-store anchor, or the witness file outside the store."""


def anchor_key(session: str) -> str:
    return PREFIX + session


def read_anchor(views: ViewStore, session: str) -> Anchor | None:
    record = views.get(anchor_key(session))
    if record is None:
        return None
    return Anchor(session=session, version=record.position, head=record.data.decode())


def anchored_sessions(views: ViewStore) -> list[str]:
    """Every session that has an anchor (so ``verify --all`` notices sessions deleted whole)."""
    record = views.get(INDEX_KEY)
    if record is None or not record.data:
        return []
    return record.data.decode().split("\n")


def advance_anchor(views: ViewStore, session: str, version: int, head: str) -> bool:
    """Record (version, head) unless the anchor already witnessed a later version.

    Returns whether the anchor moved. Callers pass only a head they have seen intact."""
    current = read_anchor(views, session)
    if current is not None and current.version >= version:
        return False
    views.put(anchor_key(session), ViewRecord(position=version, data=head.encode()))
    if current is None:
        known = anchored_sessions(views)
        known.append(session)
        views.put(INDEX_KEY, ViewRecord(position=len(known), data="\n".join(known).encode()))
    return True


def advance_after_save(app: Any, session: Any) -> None:
    """Anchor a session just saved (its in-memory ``chain_head`` is what was just recorded).

    Meant for ``CoderApp.save``/``update`` so the anchor follows every write."""
    advance_anchor(app.views, str(session.id), int(session.version), str(session.chain_head))
