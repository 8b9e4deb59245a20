"""Export filters: a time range, event kinds, and a branch (the path from the root to a node)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from coder_es.audit.errors import ExportOptionError
from coder_es.audit.records import AuditEvent
from coder_es.domain.refs import label_positions, resolve_ref
from coder_es.domain.session import Session
from coder_es.errors import UnknownNodeError

NODE_KINDS = frozenset(
    {"UserMessageAdded", "ModelResponded", "ToolCallCompleted", "ContextCompacted"}
)


def known_kinds() -> list[str]:
    return sorted(
        name
        for name, value in vars(Session).items()
        if isinstance(value, type)
        and issubclass(value, Session.Event)
        and name not in ("Event", "NodeEvent")
    )


def parse_time(text: str, option: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        msg = f"{option}: {text!r} is not an ISO time (e.g. 2025-01-31T14:00:00+00:00)"
        raise ExportOptionError(msg) from None
    # A time without a zone is taken as UTC, the zone events are recorded in.
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def parse_kinds(text: str) -> frozenset[str]:
    kinds = frozenset(k.strip() for k in text.split(",") if k.strip())
    unknown = sorted(kinds - set(known_kinds()))
    if unknown or not kinds:
        msg = (
            f"--kinds: unknown event kind(s) {', '.join(unknown) or '(none given)'}; "
            f"known: {', '.join(known_kinds())}"
        )
        raise ExportOptionError(msg)
    return kinds


@dataclass(frozen=True)
class ExportFilter:
    since: datetime | None = None
    until: datetime | None = None
    kinds: frozenset[str] | None = None
    branch: str | None = None
    """A node id, label or unique prefix: only events on the path from the root to it."""

    @property
    def empty(self) -> bool:
        return self.since is None and self.until is None and not self.kinds and not self.branch

    def describe(self, resolved_branch: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.since is not None:
            out["since"] = self.since.isoformat()
        if self.until is not None:
            out["until"] = self.until.isoformat()
        if self.kinds:
            out["kinds"] = sorted(self.kinds)
        if self.branch:
            out["branch"] = resolved_branch or self.branch
        return out


def node_labels(events: list[AuditEvent]) -> dict[str, str]:
    """Where each label points at the end of these events (one label, one node)."""
    return label_positions(
        (str(e.fields["name"]), str(e.fields["node"])) for e in events if e.kind == "NodeLabelled"
    )


def head_node(events: list[AuditEvent]) -> str | None:
    """The head at the end of these events: the newest node, or where the head last moved."""
    head: str | None = None
    for e in events:
        if e.kind in NODE_KINDS:
            head = str(e.version)
        elif e.kind == "HeadMoved":
            node = e.fields.get("node")
            head = str(node) if node is not None else None
    return head


def resolve_node(events: list[AuditEvent], ref: str) -> str:
    """``HEAD``, a node id, a label or a unique prefix, as every command resolves them."""
    nodes = [str(e.version) for e in events if e.kind in NODE_KINDS]
    try:
        return resolve_ref(
            ref, session="", nodes=nodes, labels=node_labels(events), head=head_node(events)
        )
    except UnknownNodeError as e:
        hint = f" (matches: {', '.join(e.candidates)})" if e.candidates else ""
        msg = f"--branch: no unique node or label matches {ref!r}{hint}"
        raise ExportOptionError(msg) from None


def branch_path(events: list[AuditEvent], node: str) -> set[str]:
    parents = {str(e.version): e.fields.get("parent") for e in events if e.kind in NODE_KINDS}
    path: set[str] = set()
    current: str | None = node
    while current is not None and current not in path:
        path.add(current)
        parent = parents.get(current)
        current = str(parent) if parent is not None else None
    return path


def attach_points(events: list[AuditEvent]) -> dict[int, str | None]:
    """For each event, the node it happened under: the head when it was recorded (a node event is
    its own). This places tool calls, permissions and edits on the branch they belong to."""
    head: str | None = None
    out: dict[int, str | None] = {}
    for e in events:
        if e.kind in NODE_KINDS:
            head = str(e.version)
            out[e.version] = head
        elif e.kind == "HeadMoved":
            node = e.fields.get("node")
            out[e.version] = str(node) if node is not None else None
            head = out[e.version]
        else:
            out[e.version] = head
    return out


def apply_filter(
    events: list[AuditEvent], flt: ExportFilter
) -> tuple[list[AuditEvent], str | None]:
    """The events the filter keeps, and the branch node it resolved (if any)."""
    kept = events
    resolved = None
    if flt.branch:
        resolved = resolve_node(events, flt.branch)
        path = branch_path(events, resolved)
        attach = attach_points(events)
        kept = [e for e in kept if e.kind == "Started" or attach.get(e.version) in path]
    if flt.kinds:
        kept = [e for e in kept if e.kind in flt.kinds]
    if flt.since is not None or flt.until is not None:
        since, until = flt.since, flt.until
        kept = [
            e
            for e in kept
            if (since is None or e.time >= since) and (until is None or e.time <= until)
        ]
    return kept, resolved
