"""The JSONL export and its verifier.

Layout, one canonical JSON document per line (``coder_es.domain.chain.canonical_json``):

1. header: ``{"format": "coder-es-audit-jsonl", "format_version": 1, "session": ..., "tools":
   {...}, "filters": {...}, "complete": bool, "redactions": [...], "session_head": {"version",
   "hash"}, "store_problems": [...]}``
   Format 2 adds ``"children"``: the subagent sessions below it, depth first, each ``{"session",
   "parent_session", "tool_use_id", "agent", "description", "complete", "filters", "redactions",
   "session_head", "store_problems", "events"}``, or ``{..., "missing": why}`` for one that could
   not be exported;
2. one line per event: ``{"session", "version", "topic", "kind", "timestamp", "fields", "hash"}``
   (plus ``class_version`` for upcastable events and ``redacted`` for export-time redactions);
   ``hash`` is the event's chain hash, ``fields.prev_hash`` the previous one's. The session's
   events come first, then each child's, in the header's order;
3. trailer: ``{"end": "coder-es-audit-jsonl", "events": N, "head_hash": <hash of the last event
   line>, "sha256": <sha256 of every byte before the trailer>}``.

``verify_jsonl`` checks a file on its own: each event's hash against its content, each link, the
version order, the trailer's count and head hash (a truncated file has no trailer or the wrong
head) and the byte digest (any other change). A complete export must hold versions 1..N and end at
the session head named in its header; so must each complete child, at the head its entry names.
The tree is checked too: each child is started by a ``TaskStarted`` of its parent in the file and
its ``Started`` names that parent; each ``TaskStarted`` of a complete session has its child in the
file; a child that could not be exported is reported.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from coder_es import jsonlimit
from coder_es.audit.chain_check import FileEvent, check_file_chain
from coder_es.audit.errors import UnreadableExportError
from coder_es.audit.prepared import ChildExport, PreparedExport, tool_versions
from coder_es.audit.problems import (
    DELETED,
    INSERTED,
    MALFORMED,
    MODIFIED,
    REORDERED,
    TRUNCATED,
    Problem,
    VerifyReport,
)
from coder_es.audit.records import AuditEvent, compute_hash
from coder_es.domain.chain import canonical_json

FORMAT = "coder-es-audit-jsonl"
FORMAT_VERSION = 2
"""2: the subagents' sessions follow the session's events (``children`` in the header)."""


def _child_entry(child: ChildExport) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "session": child.session,
        "parent_session": child.parent_session,
        "tool_use_id": child.tool_use_id,
        "agent": child.agent,
        "description": child.description,
    }
    p = child.prepared
    if p is None:
        entry["missing"] = child.missing
        return entry
    entry.update(
        {
            "complete": p.complete,
            "filters": p.filters,
            "redactions": p.redactions,
            "session_head": {"version": p.head_version, "hash": p.head_hash},
            "store_problems": p.store_problems,
            "events": len(p.events),
        }
    )
    return entry


def render_jsonl(prepared: PreparedExport) -> bytes:
    below = prepared.descendants()
    header = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "session": prepared.session,
        "tools": tool_versions(),
        "filters": prepared.filters,
        "complete": prepared.complete,
        "redactions": prepared.redactions,
        "session_head": {"version": prepared.head_version, "hash": prepared.head_hash},
        "store_problems": prepared.store_problems,
        "children": [_child_entry(c) for c in below],
    }
    events = list(prepared.events)
    for child in below:
        events += child.prepared.events if child.prepared is not None else []
    lines = [canonical_json(header)]
    lines += [canonical_json(e.record()) for e in events]
    body = ("\n".join(lines) + "\n").encode()
    trailer = {
        "end": FORMAT,
        "events": len(events),
        "head_hash": events[-1].chain_hash if events else "",
        "sha256": hashlib.sha256(body).hexdigest(),
    }
    return body + (canonical_json(trailer) + "\n").encode()


def _event_from(record: Any, session: str) -> AuditEvent:
    if not isinstance(record, dict):
        raise TypeError("not an object")
    fields = record["fields"]
    version = record["version"]
    if not isinstance(fields, dict) or not isinstance(version, int):
        raise TypeError("fields must be an object and version an integer")
    topic, stamp = str(record["topic"]), str(record["timestamp"])
    sid = str(record.get("session", session))
    return AuditEvent(
        session=sid,
        version=version,
        topic=topic,
        timestamp=stamp,
        fields=fields,
        chain_hash=compute_hash(sid, version, topic, stamp, fields),
        class_version=record.get("class_version"),
        redacted=tuple(record.get("redacted") or ()),
    )


def verify_jsonl(path: Path) -> VerifyReport:
    try:
        data = path.read_bytes()
    except OSError as e:
        msg = f"cannot read {path}: {e.strerror or e}"
        raise UnreadableExportError(msg) from e
    raw_lines = data.split(b"\n")
    if raw_lines and raw_lines[-1] == b"":
        raw_lines.pop()
    if not raw_lines:
        msg = f"{path} is empty: not a coder-es export"
        raise UnreadableExportError(msg)
    problems: list[Problem] = []
    header: dict[str, Any] = {}
    try:
        parsed = jsonlimit.loads(raw_lines[0])
        if isinstance(parsed, dict):
            header = parsed
    except jsonlimit.JsonDepthError as e:
        raise UnreadableExportError(f"{path}: line 1: {e}") from None
    except ValueError:
        pass
    if header.get("format") != FORMAT:
        if FORMAT.encode() not in raw_lines[0] and b'"end":"' + FORMAT.encode() not in data:
            msg = f"{path} is not a coder-es JSONL export (no {FORMAT} header)"
            raise UnreadableExportError(msg)
        problems.append(Problem("", None, MALFORMED, "line 1: the header is damaged"))
    session = str(header.get("session", ""))
    complete = header.get("complete") is True
    entries = _children(header, problems)
    order = {sid: i for i, sid in enumerate([session, *entries])}
    by_session: dict[str, list[FileEvent]] = {sid: [] for sid in order}
    items: list[FileEvent] = []
    block = 0
    trailer: dict[str, Any] | None = None
    trailer_line = 0
    digest = hashlib.sha256(raw_lines[0] + b"\n")
    for number, raw in enumerate(raw_lines[1:], start=2):
        try:
            record = jsonlimit.loads(raw)
        except jsonlimit.JsonDepthError as e:
            raise UnreadableExportError(f"{path}: line {number}: {e}") from None
        except ValueError:
            record = None
        if trailer is not None:
            problems.append(
                Problem(session, None, INSERTED, f"line {number}: content after the trailer")
            )
            continue
        if isinstance(record, dict) and record.get("end") == FORMAT:
            trailer, trailer_line = record, number
            continue
        digest.update(raw + b"\n")
        try:
            event = _event_from(record, session)
        except (KeyError, TypeError, ValueError) as e:
            problems.append(
                Problem(session, None, MALFORMED, f"line {number}: not an event record ({e})")
            )
            continue
        if event.session not in order:
            problems.append(
                Problem(
                    session,
                    event.version,
                    INSERTED,
                    f"line {number}: an event of another session ({event.session})",
                )
            )
            continue
        if order[event.session] < block:
            problems.append(
                Problem(
                    event.session,
                    event.version,
                    REORDERED,
                    f"line {number}: an event of session {event.session} among those of a "
                    "session listed after it",
                )
            )
        block = max(block, order[event.session])
        recorded = record.get("hash") if isinstance(record, dict) else None
        item = FileEvent(number, event, str(recorded), redacted=bool(event.redacted))
        items.append(item)
        by_session[event.session].append(item)
    notes: list[str] = []
    for sid, found in by_session.items():
        whole = complete if sid == session else entries[sid].get("complete") is True
        chain_problems, chain_notes = check_file_chain(sid, found, complete=whole)
        problems += chain_problems
        notes += chain_notes
        head = header.get("session_head") if sid == session else entries[sid].get("session_head")
        if whole and trailer is not None:
            problems += _check_head(sid, found, head)
        counted = entries[sid].get("events") if sid != session else None
        if isinstance(counted, int) and counted != len(found):
            problems.append(
                Problem(
                    sid,
                    None,
                    DELETED if counted > len(found) else INSERTED,
                    f"the header counts {counted} events of this subagent, the file holds "
                    f"{len(found)}",
                )
            )
    problems += _check_children(session, complete, entries, by_session)
    last = items[-1] if items else None
    if trailer is None:
        problems.append(
            Problem(
                session,
                last.event.version + 1 if last else None,
                TRUNCATED,
                f"the file ends without its trailer after line {len(raw_lines)}: truncated",
            )
        )
    else:
        problems += _check_trailer(session, trailer, trailer_line, items, digest.hexdigest())
    if entries:
        notes.append(f"{len(entries)} subagent session(s) checked with session {session}")
    return VerifyReport(
        target=str(path),
        sessions=len(order) if session else 0,
        events=len(items),
        blobs=0,
        problems=tuple(problems),
        notes=tuple(notes),
    )


def _children(header: dict[str, Any], problems: list[Problem]) -> dict[str, dict[str, Any]]:
    """The header's subagent sessions by id (none in a format 1 export)."""
    out: dict[str, dict[str, Any]] = {}
    listed = header.get("children", [])
    if not isinstance(listed, list):
        problems.append(Problem("", None, MALFORMED, "line 1: the header's children are damaged"))
        return out
    for entry in listed:
        if not isinstance(entry, dict) or not isinstance(entry.get("session"), str):
            problems.append(
                Problem("", None, MALFORMED, "line 1: a child in the header is damaged")
            )
            continue
        out[entry["session"]] = entry
    return out


def _check_head(session: str, found: list[FileEvent], head: Any) -> list[Problem]:
    """A complete session's last event must be the head its export recorded."""
    if not found:
        return []
    last = found[-1]
    head = head if isinstance(head, dict) else {}
    if head.get("version") == last.event.version and head.get("hash") == last.recorded:
        return []
    return [
        Problem(
            session,
            last.event.version,
            TRUNCATED,
            f"the export ends at version {last.event.version} but the session head in "
            f"its header is version {head.get('version')}",
        )
    ]


def _check_children(
    session: str,
    complete: bool,
    entries: dict[str, dict[str, Any]],
    by_session: dict[str, list[FileEvent]],
) -> list[Problem]:
    """The links of the tree of work: each child listed is started by a ``task`` of its parent
    (``TaskStarted``) and names that parent in its ``Started``; each ``task`` of a complete
    session has its child in the export; a child that could not be exported is a problem."""
    problems: list[Problem] = []
    whole = {session: complete} | {s: e.get("complete") is True for s, e in entries.items()}
    starts: dict[str, list[AuditEvent]] = {}
    for sid, found in by_session.items():
        starts[sid] = [i.event for i in found if i.event.kind == "TaskStarted"]
    for child, entry in entries.items():
        parent = str(entry.get("parent_session"))
        call = entry.get("tool_use_id")
        if entry.get("missing") is not None:
            problems.append(
                Problem(
                    child,
                    None,
                    DELETED,
                    f"the subagent of task {call} (session {parent}) is not in the export: "
                    f"{entry.get('missing')}",
                )
            )
        linked = any(
            e.fields.get("child_session") == child and e.fields.get("tool_use_id") == call
            for e in starts.get(parent, [])
        )
        if whole.get(parent) and not linked:
            problems.append(
                Problem(
                    child,
                    None,
                    INSERTED,
                    f"no task of session {parent} started this session (no TaskStarted "
                    f"{call} -> {child} in the export)",
                )
            )
        first = by_session.get(child) or []
        if first and first[0].event.kind == "Started":
            named = first[0].event.fields.get("parent_session")
            if named != parent:
                problems.append(
                    Problem(
                        child,
                        1,
                        MALFORMED,
                        f"the header makes it a subagent of {parent}, its Started names {named}",
                    )
                )
    for sid, tasks in starts.items():
        if not whole.get(sid):
            continue
        for e in tasks:
            if str(e.fields.get("child_session")) not in entries:
                problems.append(
                    Problem(
                        sid,
                        e.version,
                        DELETED,
                        f"task {e.fields.get('tool_use_id')} started session "
                        f"{e.fields.get('child_session')}, which is not in the export",
                    )
                )
    return problems


def _check_trailer(
    session: str, trailer: dict[str, Any], line: int, items: list[FileEvent], digest: str
) -> list[Problem]:
    problems = []
    count = trailer.get("events")
    if count != len(items):
        kind = DELETED if isinstance(count, int) and count > len(items) else INSERTED
        problems.append(
            Problem(
                session,
                None,
                kind,
                f"the trailer (line {line}) counts {count} events, the file holds {len(items)}",
            )
        )
    head = items[-1].recorded if items else ""
    if trailer.get("head_hash") != head:
        problems.append(
            Problem(
                session,
                items[-1].event.version if items else None,
                TRUNCATED if count != len(items) else MODIFIED,
                f"the last event's hash {head[:16]} is not the head hash in the trailer "
                f"({str(trailer.get('head_hash'))[:16]})",
            )
        )
    if trailer.get("sha256") != digest:
        problems.append(
            Problem(
                session,
                None,
                MODIFIED,
                "the file's bytes changed after export (the sha256 in the trailer does not match)",
            )
        )
    return problems
