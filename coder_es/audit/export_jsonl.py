"""The JSONL export and its verifier.

Layout, one canonical JSON document per line (``coder_es.domain.chain.canonical_json``):

1. header: ``{"format": "coder-es-audit-jsonl", "format_version": 1, "session": ..., "tools":
   {...}, "filters": {...}, "complete": bool, "redactions": [...], "session_head": {"version",
   "hash"}, "store_problems": [...]}``
2. one line per event: ``{"session", "version", "topic", "kind", "timestamp", "fields", "hash"}``
   (plus ``class_version`` for upcastable events and ``redacted`` for export-time redactions);
   ``hash`` is the event's chain hash, ``fields.prev_hash`` the previous one's;
3. trailer: ``{"end": "coder-es-audit-jsonl", "events": N, "head_hash": <hash of the last event
   line>, "sha256": <sha256 of every byte before the trailer>}``.

``verify_jsonl`` checks a file on its own: each event's hash against its content, each link, the
version order, the trailer's count and head hash (a truncated file has no trailer or the wrong
head) and the byte digest (any other change). A complete export must hold versions 1..N and end at
the session head named in its header.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from coder_es.audit.chain_check import FileEvent, check_file_chain
from coder_es.audit.errors import UnreadableExportError
from coder_es.audit.export import PreparedExport, tool_versions
from coder_es.audit.problems import (
    DELETED,
    INSERTED,
    MALFORMED,
    MODIFIED,
    TRUNCATED,
    Problem,
    VerifyReport,
)
from coder_es.audit.records import AuditEvent, compute_hash
from coder_es.domain.chain import canonical_json

FORMAT = "coder-es-audit-jsonl"
FORMAT_VERSION = 1


def render_jsonl(prepared: PreparedExport) -> bytes:
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
    }
    lines = [canonical_json(header)]
    lines += [canonical_json(e.record()) for e in prepared.events]
    body = ("\n".join(lines) + "\n").encode()
    trailer = {
        "end": FORMAT,
        "events": len(prepared.events),
        "head_hash": prepared.events[-1].chain_hash if prepared.events else "",
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
        parsed = json.loads(raw_lines[0])
        if isinstance(parsed, dict):
            header = parsed
    except ValueError:
        pass
    if header.get("format") != FORMAT:
        if FORMAT.encode() not in raw_lines[0] and b'"end":"' + FORMAT.encode() not in data:
            msg = f"{path} is not a coder-es JSONL export (no {FORMAT} header)"
            raise UnreadableExportError(msg)
        problems.append(Problem("", None, MALFORMED, "line 1: the header is damaged"))
    session = str(header.get("session", ""))
    complete = header.get("complete") is True
    items: list[FileEvent] = []
    trailer: dict[str, Any] | None = None
    trailer_line = 0
    digest = hashlib.sha256(raw_lines[0] + b"\n")
    for number, raw in enumerate(raw_lines[1:], start=2):
        try:
            record = json.loads(raw)
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
        if event.session != session:
            problems.append(
                Problem(
                    session,
                    event.version,
                    INSERTED,
                    f"line {number}: an event of another session ({event.session})",
                )
            )
            continue
        recorded = record.get("hash") if isinstance(record, dict) else None
        items.append(FileEvent(number, event, str(recorded), redacted=bool(event.redacted)))
    chain_problems, notes = check_file_chain(session, items, complete=complete)
    problems += chain_problems
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
    if complete and trailer is not None and last is not None:
        head = header.get("session_head") or {}
        if head.get("version") != last.event.version or head.get("hash") != last.recorded:
            problems.append(
                Problem(
                    session,
                    last.event.version,
                    TRUNCATED,
                    f"the export ends at version {last.event.version} but the session head in "
                    f"its header is version {head.get('version')}",
                )
            )
    return VerifyReport(
        target=str(path),
        sessions=1 if session else 0,
        events=len(items),
        blobs=0,
        problems=tuple(problems),
        notes=tuple(notes),
    )


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
