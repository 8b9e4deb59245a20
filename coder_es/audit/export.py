"""Exporting a session: choose events (filters), redact further (globs), render a format.

``export_session(app, ref, options)`` returns the export as bytes. Every format is a pure
function of the recorded events (and blobs), with no clock or random ids in it, so exporting the
same events twice gives the same bytes.

An export holds the whole tree of work: the subagents a session started (its ``TaskStarted``
events, depth first) are prepared like it, with the same time and kind filters and the same
redaction (a ``--branch`` names a node of the session exported: the subagents started on that
branch are included whole). ``ExportOptions(children=False)`` leaves them out, and the export
then says it is not complete.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from typing import Any
from uuid import UUID

from coder_es import __version__
from coder_es.audit.anchor import advance_anchor, read_anchor
from coder_es.audit.chain_check import StoreChainCheck
from coder_es.audit.errors import ExportOptionError
from coder_es.audit.export_redaction import GlobRedaction
from coder_es.audit.filters import ExportFilter, apply_filter
from coder_es.audit.records import AuditEvent, load_session_events
from coder_es.errors import CoderESError, SessionNotFoundError

FORMATS = ("jsonl", "otel", "md", "html")


@dataclass(frozen=True)
class ExportOptions:
    format: str = "jsonl"
    filter: ExportFilter = field(default_factory=ExportFilter)
    redact_globs: tuple[str, ...] = ()
    children: bool = True
    """Include the subagents' sessions (the default: the export is the whole tree of work)."""
    capture_content: bool = False
    """otel: the content opt-in (``coder_es.telemetry.settings.content_opted_in``)."""

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            msg = f"unknown export format {self.format!r}; choose one of {', '.join(FORMATS)}"
            raise ExportOptionError(msg)


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


def prepare(
    app: Any, ref: UUID | str, options: ExportOptions, _above: frozenset[str] = frozenset()
) -> PreparedExport:
    sid = ref if isinstance(ref, UUID) else app.resolve_session(ref)
    session = str(sid)
    events = load_session_events(app, sid)
    if not events:
        raise SessionNotFoundError(session, store=app.config.describe())
    check = StoreChainCheck(session, anchor=read_anchor(app.views, session))
    for e in events:
        check.feed(e)
    problems = check.finish()
    if not problems and check.last_hash is not None:
        advance_anchor(app.views, session, check.last_version, check.last_hash)
    selected, branch = apply_filter(events, options.filter)
    redacted, listing = GlobRedaction(options.redact_globs).apply(selected)
    filters = options.filter.describe(branch)
    tasks = _tasks(events, options.filter)
    children: tuple[ChildExport, ...] = ()
    if tasks and not options.children:
        filters["children"] = "excluded"
    elif tasks:
        # The branch names a node of this session: its children are exported whole.
        below = replace(options, filter=replace(options.filter, branch=None))
        children = tuple(_child(app, session, t, below, _above | {session}) for t in tasks)
    return PreparedExport(
        session=session,
        all_events=events,
        events=redacted,
        head_version=events[-1].version,
        head_hash=events[-1].chain_hash,
        filters=filters,
        redactions=listing,
        store_problems=[str(p) for p in problems],
        children=children,
        capture_content=options.capture_content,
    )


def _tasks(events: list[AuditEvent], flt: ExportFilter) -> list[AuditEvent]:
    """The ``TaskStarted`` events whose children the export holds: on the branch, if one is
    named (time and kind filters choose the children's events, not which children)."""
    kept = apply_filter(events, ExportFilter(branch=flt.branch))[0] if flt.branch else events
    return [e for e in kept if e.kind == "TaskStarted"]


def _child(
    app: Any, parent: str, task: AuditEvent, options: ExportOptions, above: frozenset[str]
) -> ChildExport:
    f = task.fields
    session = str(f.get("child_session"))
    prepared: PreparedExport | None = None
    missing: str | None = None
    try:
        child_id: UUID | None = UUID(session)
    except ValueError:
        child_id, missing = None, f"{session!r} is not a session id"
    if session in above:
        missing = "it is one of the sessions above it (a cycle in the task links)"
    elif child_id is not None:
        try:
            prepared = prepare(app, child_id, options, above)
        except SessionNotFoundError:
            missing = "the session is not in the store"
        except CoderESError as e:  # gone from the store, or damaged: said, never a traceback
            missing = str(e)
    return ChildExport(
        session=session,
        parent_session=parent,
        tool_use_id=str(f.get("tool_use_id")),
        agent=str(f.get("agent")),
        description=str(f.get("description")),
        prepared=prepared,
        missing=missing,
    )


def render(app: Any, prepared: PreparedExport, fmt: str, globs: tuple[str, ...] = ()) -> bytes:
    if fmt == "jsonl":
        from coder_es.audit.export_jsonl import render_jsonl

        return render_jsonl(prepared)
    if fmt == "otel":
        from coder_es.audit.export_otel import render_otel

        return render_otel(prepared)
    from coder_es.audit.transcript import build_transcript

    transcript = build_transcript(prepared, app.blobs, GlobRedaction(globs))
    if fmt == "md":
        from coder_es.audit.export_md import render_md

        return render_md(transcript)
    from coder_es.audit.export_html import render_html

    return render_html(transcript)


def export_session(app: Any, ref: UUID | str, options: ExportOptions) -> bytes:
    prepared = prepare(app, ref, options)
    return render(app, prepared, options.format, options.redact_globs)
