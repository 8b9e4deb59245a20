"""What an export holds once prepared (the session's events, filtered and redacted, with its
subagents'): the value every format renderer reads. Below ``export`` so the renderers need not
import the module that dispatches to them."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from coder_es._version import __version__
from coder_es.audit.records import AuditEvent


@dataclass(frozen=True)
class PreparedExport:
    session: str
    all_events: list[AuditEvent]
    """Every recorded event of the session (the tree and labels are drawn from these)."""
    events: list[AuditEvent]
    """What the export shows: filtered, then redacted."""
    head_version: int
    head_hash: str
    filters: dict[str, Any]
    redactions: list[dict[str, Any]]
    store_problems: list[str]
    """Chain problems found while loading: an export of a damaged session says so up front."""
    children: tuple[ChildExport, ...] = ()
    """The subagents this session started (its ``TaskStarted``), in the order it started them."""
    capture_content: bool = False
    """From ``ExportOptions``: the otel export's content opt-in."""

    @property
    def complete(self) -> bool:
        return not self.filters

    def descendants(self) -> list[ChildExport]:
        """Every subagent below this session, depth first (a child, then its own children)."""
        out: list[ChildExport] = []
        for child in self.children:
            out.append(child)
            if child.prepared is not None:
                out += child.prepared.descendants()
        return out

    def started(self) -> dict[str, Any]:
        first = self.all_events[0] if self.all_events else None
        return dict(first.fields) if first is not None and first.kind == "Started" else {}


@dataclass(frozen=True)
class ChildExport:
    """A subagent's session as an export holds it, with the ``task`` call that started it."""

    session: str
    parent_session: str
    tool_use_id: str
    agent: str
    description: str
    prepared: PreparedExport | None
    missing: str | None = None
    """Why the child's events are not in the export (it is gone from the store, damaged)."""


def tool_versions() -> dict[str, str]:
    from importlib import metadata  # here: importing it costs every export's start-up ~10 ms

    try:
        es = metadata.version("eventsourcing")
    except metadata.PackageNotFoundError:
        es = "unknown"
    return {
        "coder-es": __version__,
        "eventsourcing": es,
        "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
    }
