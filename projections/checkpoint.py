"""Per-session projections that open fast: a checkpoint in the view store plus the events after it.

A projection here is a pure reducer over one session's events (``apply``), whose whole state can be
written out as plain data (``to_state``) and read back (``from_state``). ``Tracked`` keeps one open:
it loads the checkpoint stored under ``<kind>:<session id>`` (with the session version it reached),
applies only the events after that version, and writes a new checkpoint every ``every`` events or
when asked. A checkpoint that cannot be read (another format, corruption) is ignored and the
projection is rebuilt from zero: the log stays the only source of truth.

States are encoded with msgpack (msgspec) in a fixed key order, so the same events always give the
same bytes: tests compare an incrementally maintained projection with one rebuilt from zero by
comparing ``encode_state`` outputs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar
from uuid import UUID

import msgspec

from coder_es.application import CoderApp
from coder_es.domain.session import NodeId
from coder_es.store.views import ViewRecord

_ENCODER = msgspec.msgpack.Encoder(order="deterministic")
_DECODER = msgspec.msgpack.Decoder()


class Projection(Protocol):
    position: int
    """The version of the last session event applied (0: none)."""

    def apply(self, event: Any) -> None: ...

    def to_state(self) -> dict[str, Any]: ...


P = TypeVar("P", bound=Projection)


class SessionGraph(Protocol):
    """What every per-session projection keeps: the session, where it forked from, and its nodes
    (numbered by version, 0 the root) with their parents and depths."""

    position: int
    session: str
    parent_session: str | None
    parent_node: NodeId | None
    parent: dict[int, int]
    depth: dict[int, int]


def graph_state(graph: SessionGraph) -> dict[str, Any]:
    """The shared fields as plain data; ``ids`` orders the per-node lists a projection adds."""
    ids = list(graph.parent)
    return {
        "position": graph.position,
        "session": graph.session,
        "parent_session": graph.parent_session,
        "parent_node": graph.parent_node,
        "ids": ids,
        "parents": [graph.parent[i] for i in ids],
        "depths": [graph.depth[i] for i in ids],
    }


def load_graph_state(graph: SessionGraph, state: dict[str, Any]) -> list[int]:
    """Set the shared fields from ``graph_state`` output; returns ``ids`` for the caller's lists."""
    graph.position = int(state["position"])
    graph.session = state["session"]
    graph.parent_session = state["parent_session"]
    graph.parent_node = state["parent_node"]
    ids: list[int] = state["ids"]
    graph.parent = dict(zip(ids, state["parents"], strict=True))
    graph.depth = dict(zip(ids, state["depths"], strict=True))
    graph.depth[0] = 0
    return ids


def encode_state(projection: Projection, fmt: int) -> bytes:
    state = projection.to_state()
    try:
        return _ENCODER.encode({"format": fmt, "state": state})
    except UnicodeEncodeError:
        # A non-UTF-8 file name (a str with surrogate escapes) has no msgpack form; JSON with
        # ASCII escapes carries it losslessly.
        return _ENCODER.encode({"format": fmt, "json": json.dumps(state, ensure_ascii=True)})


def decode_state(data: bytes, fmt: int) -> dict[str, Any] | None:
    """The stored state, or None when it is of another format or unreadable."""
    try:
        doc = _DECODER.decode(data)
    except msgspec.DecodeError:
        return None
    if not isinstance(doc, dict) or doc.get("format") != fmt:
        return None
    state = json.loads(doc["json"]) if isinstance(doc.get("json"), str) else doc.get("state")
    return state if isinstance(state, dict) else None


class Tracked(Generic[P]):
    """One session's projection kept up to date with the log and checkpointed in ``app.views``."""

    def __init__(
        self,
        app: CoderApp,
        session_id: UUID,
        *,
        kind: str,
        fmt: int,
        new: Callable[[], P],
        load: Callable[[dict[str, Any]], P],
        every: int = 1000,
        prepare: Callable[[P], None] | None = None,
    ) -> None:
        self.app = app
        self.session_id = session_id
        self.key = f"{kind}:{session_id}"
        self.fmt = fmt
        self.every = every
        self._new = new
        self._prepare = prepare
        self._unsaved = 0
        self._stored = False
        """Whether the store holds a checkpoint of ``projection`` as it was before the
        ``unsaved`` events were applied."""
        self.projection = self._load(load)

    def _load(self, load: Callable[[dict[str, Any]], P]) -> P:
        record = self.app.views.get(self.key)
        if record is not None:
            state = decode_state(record.data, self.fmt)
            if state is not None:
                try:
                    projection = load(state)
                except (KeyError, TypeError, ValueError):
                    projection = None  # a malformed checkpoint only costs a rebuild
                if projection is not None and projection.position == record.position:
                    self._stored = True
                    return projection
        return self._new()

    @property
    def position(self) -> int:
        return self.projection.position

    def catch_up(self, events: Sequence[Any] | None = None) -> P:
        """Apply the events recorded since the last call; checkpoint if enough accumulated.
        ``events``: the session's events from at most this position on, already read (by a
        caller that opens several projections or the session too: one read of the log)."""
        position = self.projection.position
        if events is None:
            events = self.app.session_events(self.session_id, gt=position)
        applied = 0
        for event in events:
            if event.originator_version <= position:
                continue
            self.projection.apply(event)
            applied += 1
        self._unsaved += applied
        if self._unsaved >= self.every:
            self.save()
        if self._prepare is not None:
            self._prepare(self.projection)
        return self.projection

    @property
    def unsaved(self) -> int:
        """Events applied since the last checkpoint."""
        return self._unsaved

    def open(self, *, save_after: int = 200, events: Sequence[Any] | None = None) -> P:
        """Catch up, and checkpoint when that replayed enough events to be worth keeping."""
        projection = self.catch_up(events)
        if self._unsaved >= save_after:
            self.save()
        return projection

    def save(self) -> None:
        data = encode_state(self.projection, self.fmt)
        self.app.views.put(self.key, ViewRecord(self.projection.position, data))
        self._unsaved = 0
        self._stored = True

    def checkpoint(self) -> None:
        """Save unless the stored checkpoint already is this state (a read-only command that
        replayed nothing writes nothing: no write transaction, no fsync)."""
        if self._unsaved or not self._stored:
            self.save()

    def rebuild(self) -> P:
        """Drop the state and replay every event (the result must equal the incremental one)."""
        self.projection = self._new()
        self._unsaved = 0
        self._stored = False
        return self.catch_up()
