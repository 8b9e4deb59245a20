"""``verify``: recompute the hash chains of the store (one session or all) or of an exported file.

Public entry points:

- ``verify_session(app, ref)``: one session's chain, its anchor and the blobs it refers to;
- ``verify_store(app)``: every session (one pass over the notification log, split across processes
  for a large store), every anchor (a session deleted whole is noticed), every blob in the store;
- ``verify_export(path)``: a JSONL export on its own (see ``coder_es.audit.export_jsonl``).

A session found intact advances its anchor (``coder_es.store.anchor``) so later truncation shows.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any
from uuid import UUID

from coder_es.audit.blobrefs import REF_KINDS, blob_refs
from coder_es.audit.chain_check import StoreChainCheck
from coder_es.audit.fastlink import FastLinker
from coder_es.audit.problems import (
    BLOB_CORRUPT,
    BLOB_MISSING,
    DELETED,
    LOST,
    MALFORMED,
    UNDECODABLE,
    Problem,
    SessionHead,
    VerifyReport,
)
from coder_es.audit.records import (
    AuditEvent,
    Undecodable,
    iter_session_records,
    undecodable_reason,
)
from coder_es.audit.segments import (
    PARALLEL_MIN_EVENTS,
    RangeSummary,
    Stitched,
    can_split,
    scan_parallel,
    scan_range,
    stitch,
    worker_count,
)
from coder_es.domain.chain import SEALED_FORMS
from coder_es.errors import BlobNotFoundError, SessionNotFoundError, StoreError
from coder_es.store.anchor import Anchor, advance_anchor, anchored_sessions, read_anchor
from coder_es.store.witness import read_witness, witness_of_location

NOTIFICATION_BATCH = 5000
REF_TOPIC_ENDINGS = tuple(f".{kind}" for kind in sorted(REF_KINDS))


def _resolve(app: Any, ref: UUID | str) -> UUID:
    if isinstance(ref, UUID):
        return ref
    resolved: UUID = app.resolve_session(ref)
    return resolved


def _check_blobs(app: Any, refs: dict[str, tuple[str, int, str]]) -> list[Problem]:
    """Referenced blobs that are missing or whose content no longer matches their hash."""
    problems = []
    sealed: dict[str, str] = {}  # digest -> sha256 of its stored (redacted) form
    for digest, (session, version, what) in sorted(refs.items()):
        try:
            # A sealed blob is checked without its key: its stored form against the chain.
            stored = app.blobs.check(digest)
            if stored is not None:
                sealed[digest] = stored
        except BlobNotFoundError:
            problems.append(
                Problem(
                    session, version, BLOB_MISSING, f"blob {digest} ({what}) is not in the store"
                )
            )
        except StoreError as e:
            problems.append(Problem(session, version, BLOB_CORRUPT, f"{what}: {e}"))
    return problems + _check_stored_forms(app, refs, sealed)


def _check_stored_forms(
    app: Any, refs: dict[str, tuple[str, int, str]], sealed: dict[str, str]
) -> list[Problem]:
    """Sealed blobs whose stored (redacted) form is not the one the chain recorded: the form
    exports and cassettes show, rewritten (issue 29). The events recording the forms are read
    again, once per session that references a sealed blob (they are rare). A blob sealed before
    forms were recorded (or outside any session) has none to compare with."""
    if not sealed:
        return []
    by_session: dict[str, set[str]] = {}
    for digest in sealed:
        by_session.setdefault(refs[digest][0], set()).add(digest)
    problems = []
    for session, digests in sorted(by_session.items()):
        recorded: dict[str, tuple[str, int]] = {}
        for record in iter_session_records(app, UUID(session)):
            if not isinstance(record, AuditEvent):
                continue  # undecodable: the chain walk reported it
            forms = record.fields.get(SEALED_FORMS)
            if isinstance(forms, dict):
                for digest, form in forms.items():
                    recorded.setdefault(digest, (str(form), record.version))
        for digest in sorted(digests):
            found = recorded.get(digest)
            if found is not None and found[0] != sealed[digest]:
                what = refs[digest][2]
                detail = (
                    f"{what}: the stored (redacted) form of sealed blob {digest} was changed: "
                    f"it no longer matches the digest version {found[1]} recorded"
                )
                problems.append(Problem(session, found[1], BLOB_CORRUPT, detail))
    return problems


def _finish_session(
    app: Any, check: StoreChainCheck, advance: bool
) -> tuple[list[Problem], SessionHead | None]:
    problems = check.finish()
    if check.events == 0 or check.last_hash is None:
        return problems, None
    head = SessionHead(check.session, check.last_version, check.last_hash)
    if advance and not problems:
        advance_anchor(app.views, check.session, check.last_version, check.last_hash)
    return problems, head


def verify_session(
    app: Any,
    ref: UUID | str,
    *,
    check_blobs: bool = True,
    advance: bool = True,
    _above: frozenset[str] = frozenset(),
) -> VerifyReport:
    """One session's chain, its anchor and its blobs, then those of the subagents it started
    (its ``TaskStarted`` events): verifying a session verifies the whole tree of its work."""
    sid = _resolve(app, ref)
    session = str(sid)
    check = StoreChainCheck(session, anchor=WitnessedHeads(app).anchor(session))
    refs: dict[str, tuple[str, int, str]] = {}
    tasks: list[AuditEvent] = []
    records = _noting_tasks(iter_session_records(app, sid), tasks)
    _feed_records(check, records, refs if check_blobs else None)
    if check.events == 0 and check.anchor is None:
        raise SessionNotFoundError(session, store=app.config.describe())
    problems, head = _finish_session(app, check, advance)
    if check.events == 0:
        problems.append(_gone(session, check))
    problems += _check_blobs(app, refs)
    report = VerifyReport(
        target=session,
        sessions=1,
        events=check.events,
        blobs=len(refs),
        problems=tuple(problems),
        heads=(head,) if head else (),
    )
    for task in tasks:
        report = _with_child(app, report, task, check_blobs, advance, _above | {session})
    if tasks and not _above:
        count = report.sessions - 1
        report = replace(report, notes=(*report.notes, f"{count} subagent session(s) checked"))
    return report


def _noting_tasks(records: Any, tasks: list[AuditEvent]) -> Any:
    for record in records:
        if isinstance(record, AuditEvent) and record.kind == "TaskStarted":
            tasks.append(record)
        yield record


def _with_child(
    app: Any,
    report: VerifyReport,
    task: AuditEvent,
    check_blobs: bool,
    advance: bool,
    above: frozenset[str],
) -> VerifyReport:
    """``report`` with the subagent ``task`` started verified too (or why it cannot be)."""
    child = str(task.fields.get("child_session"))
    where = f"the subagent of task {task.fields.get('tool_use_id')}"
    problem: Problem | None = None
    if child in above:
        problem = Problem(task.session, task.version, MALFORMED, f"{where} is a session above it")
    else:
        try:
            found = verify_session(
                app, UUID(child), check_blobs=check_blobs, advance=advance, _above=above
            )
        except (ValueError, SessionNotFoundError):
            problem = Problem(
                task.session,
                task.version,
                DELETED,
                f"{where}, session {child}, is not in the store",
            )
    if problem is not None:
        return replace(report, problems=(*report.problems, problem))
    return replace(
        report,
        sessions=report.sessions + found.sessions,
        events=report.events + found.events,
        blobs=report.blobs + found.blobs,
        problems=report.problems + found.problems,
        heads=report.heads + found.heads,
    )


def _feed_records(
    check: StoreChainCheck,
    records: Any,
    refs: dict[str, tuple[str, int, str]] | None,
) -> None:
    for record in records:
        if isinstance(record, Undecodable):
            if record.version is None:
                check.problems.append(Problem(check.session, None, UNDECODABLE, record.reason))
            else:
                check.feed_undecodable(record.version, record.reason)
            continue
        check.feed(record)
        if refs is not None and record.kind in REF_KINDS:
            try:
                found = list(blob_refs(record))
            except Exception as e:  # a field of the wrong shape: the event is damaged
                check.problems.append(
                    Problem(check.session, record.version, UNDECODABLE, undecodable_reason(e))
                )
                continue
            for digest, what in found:
                refs.setdefault(digest, (check.session, record.version, what))


def _gone(session: str, check: StoreChainCheck) -> Problem:
    anchor = check.anchor
    seen = f" (version {anchor.version} was recorded, head {anchor.head[:16]})" if anchor else ""
    return Problem(session, 1, DELETED, f"every event of the session is gone{seen}")


def verify_store(
    app: Any, *, check_blobs: bool = True, advance: bool = True, workers: int | None = None
) -> VerifyReport:
    """Every session in the store, every anchor, every blob.

    A quick pass answers whether every chain is intact, split across ``workers`` processes (default:
    the CPUs this process may use) when the store is large and on a backend other processes can
    open (``coder_es.audit.segments``). When a chain is not intact, or the quick pass cannot run,
    the exact pass below reads the log again and names every problem."""
    witnessed = WitnessedHeads(app)
    indexed = {a.session: a.version for a in _indexed_anchors(witnessed)}
    quick = _quick_pass(app, witnessed, indexed, check_blobs, workers)
    if quick is None:
        return _exact_pass(app, check_blobs, advance, witnessed)
    intact, refs, events = quick
    problems: list[Problem] = []
    heads: list[SessionHead] = []
    for found in sorted(intact, key=lambda s: s.session):
        heads.append(SessionHead(found.session, found.last_version, found.last_hash))
        if advance:
            advance_anchor(app.views, found.session, found.last_version, found.last_hash)
    return _report(
        app,
        witnessed,
        seen_sessions={s.session for s in intact},
        events=events,
        refs=refs,
        problems=problems,
        heads=heads,
        check_blobs=check_blobs,
    )


class WitnessedHeads:
    """Each session's witnessed head: the in-store anchor's, or the witness file's (outside the
    store, ``coder_es.store.witness``) when it saw as far or further."""

    def __init__(self, app: Any) -> None:
        self.views = app.views
        witness = getattr(app, "witness", None)
        self.path = None if witness is None else witness.path
        self.outside = {} if witness is None else witness.latest()

    def anchor(self, session: str) -> Anchor | None:
        inside = read_anchor(self.views, session)
        seen = self.outside.get(session)
        if seen is not None and (inside is None or seen.version >= inside.version):
            return Anchor(session, seen.version, seen.head, source=f"witness {self.path}")
        return inside

    def sessions(self) -> list[str]:
        """Every session witnessed (so ``verify --all`` notices sessions deleted whole)."""
        inside = anchored_sessions(self.views)
        return inside + sorted(set(self.outside) - set(inside))

    def lost(self, seen_sessions: set[str]) -> Problem | None:
        gone = [s for s in self.outside if s not in seen_sessions]
        return _lost(len(gone), self.path) if gone else None


def _lost(count: int, path: Path | None) -> Problem:
    detail = (
        f"the store lost {count} session(s) that the witness {path} saw "
        "(deleted, or the store was replaced or emptied); if that loss is intended, "
        "remove that file"
    )
    return Problem("", None, LOST, detail)


def verify_missing_store(config: Any) -> VerifyReport | None:
    """``verify --all`` where the store is gone altogether (its directory deleted): what its
    witness saw is lost. None when no witness saw anything there (then there is nothing to
    verify). Nothing is created."""
    path = witness_of_location(config)
    seen = read_witness(path)
    if not seen:
        return None
    problems = [_lost(len(seen), path)]
    for session, w in sorted(seen.items()):
        anchor = Anchor(session, w.version, w.head, source=f"witness {path}")
        problems.append(_gone(session, StoreChainCheck(session, anchor=anchor)))
    return VerifyReport(target="--all", sessions=0, events=0, blobs=0, problems=tuple(problems))


def _indexed_anchors(witnessed: WitnessedHeads) -> list[Anchor]:
    found = (witnessed.anchor(session) for session in witnessed.sessions())
    return [a for a in found if a is not None]


def _quick_pass(
    app: Any,
    witnessed: WitnessedHeads,
    indexed: dict[str, int],
    check_blobs: bool,
    workers: int | None,
) -> tuple[list[Stitched], dict[str, tuple[str, int, str]], int] | None:
    """(intact sessions, blob references, events), or None when some chain needs the exact pass."""
    count = worker_count() if workers is None else workers
    summaries: list[RangeSummary] | None = None
    if count > 1 and can_split(app):
        last_id = app.recorder.max_notification_id() or 0
        if last_id >= PARALLEL_MIN_EVENTS:
            try:
                summaries = scan_parallel(app, last_id, indexed, check_blobs, count)
            except Exception:  # any failure at all: the exact pass decides (and raises, if it must)
                return None
    if summaries is None:
        linker = FastLinker(app.mapper)
        try:
            summaries = [scan_range(app, linker, 1, None, indexed, check_blobs)]
        except Exception:  # an event that cannot be decoded: the exact pass names it
            return None

    def anchor_of(session: str) -> tuple[int, str] | None:
        anchor = witnessed.anchor(session)
        return None if anchor is None else (anchor.version, anchor.head)

    intact, broken, events = stitch(summaries, anchor_of)
    if broken:
        return None
    refs: dict[str, tuple[str, int, str]] = {}
    for summary in summaries:
        for ref in summary.refs:
            refs.setdefault(ref.digest, (ref.session, ref.version, ref.what))
    return intact, refs, events


def _exact_pass(
    app: Any, check_blobs: bool, advance: bool, witnessed: WitnessedHeads | None = None
) -> VerifyReport:
    """One sequential pass over the notification log, diagnosing every broken chain."""
    witnessed = witnessed or WitnessedHeads(app)
    linker = FastLinker(app.mapper)
    decoder = linker.decoder
    checks: dict[str, StoreChainCheck] = {}
    disordered: set[str] = set()
    refs: dict[str, tuple[str, int, str]] = {}
    events = 0
    problems: list[Problem] = []
    for stored in _read_log(app, problems):
        events += 1
        session = decoder.session_str(stored.originator_id)
        if session in disordered:
            continue
        if not isinstance(stored.originator_version, int):
            detail = f"an event's version column holds {stored.originator_version!r}, not a number"
            problems.append(Problem(session, None, UNDECODABLE, detail))
            continue
        check = checks.get(session)
        if check is None:
            check = checks[session] = StoreChainCheck(session, anchor=witnessed.anchor(session))
        if stored.originator_version <= check.last_version:
            # Versions out of log order: only possible if rows were renumbered. Check this
            # session again from its events in version order.
            disordered.add(session)
            continue
        if check_blobs and stored.topic.endswith(REF_TOPIC_ENDINGS):
            _feed_records(check, [_decoded(linker, stored, session)], refs)
            continue
        try:
            if not isinstance(stored.state, bytes):
                raise TypeError(f"the state column holds {type(stored.state).__name__}, not bytes")
            chain_hash, prev_hash = linker.link(stored)
        except Exception as e:  # any damage at all: a finding, and the walk goes on
            check.feed_undecodable(stored.originator_version, undecodable_reason(e))
            continue
        check.feed_link(
            stored.originator_version, chain_hash, prev_hash, partial(decoder.decode, stored)
        )
    for session in disordered:
        check = checks[session] = StoreChainCheck(session, anchor=witnessed.anchor(session))
        _feed_records(check, iter_session_records(app, UUID(session)), None)
    heads: list[SessionHead] = []
    for session in sorted(checks):
        found, head = _finish_session(app, checks[session], advance)
        problems += found
        if head is not None:
            heads.append(head)
    return _report(
        app,
        witnessed,
        seen_sessions=set(checks),
        events=events,
        refs=refs,
        problems=problems,
        heads=heads,
        check_blobs=check_blobs,
    )


def _decoded(linker: FastLinker, stored: Any, session: str) -> Any:
    try:
        if not isinstance(stored.state, bytes):
            raise TypeError(f"the state column holds {type(stored.state).__name__}, not bytes")
        return linker.decode(stored)
    except Exception as e:
        return Undecodable(session, stored.originator_version, undecodable_reason(e))


def _read_log(app: Any, problems: list[Problem]) -> Any:
    """The notification log in order. A page the recorder cannot read (a row whose columns no
    longer hold what they should) is read again one row at a time; each unreadable row is a
    finding (its session may be unknown) and the rest is read on."""
    start = 1
    careful_until = 0  # below this position, read row by row (a page there failed)
    last_id: int | None = None
    while True:
        limit = 1 if start < careful_until else NOTIFICATION_BATCH
        try:
            batch = app.recorder.select_notifications(start=start, limit=limit)
        except Exception as e:
            if limit > 1:
                careful_until = start + NOTIFICATION_BATCH
                continue
            if last_id is None:
                last_id = int(app.recorder.max_notification_id() or 0)
            if start > last_id:
                return
            problems.append(
                Problem(
                    "",
                    None,
                    UNDECODABLE,
                    f"the stored row at log position {start} cannot be read: "
                    f"{undecodable_reason(e)}",
                )
            )
            start += 1
            continue
        yield from batch
        if len(batch) < limit:
            return
        start = batch[-1].id + 1


def _report(
    app: Any,
    witnessed: WitnessedHeads,
    *,
    seen_sessions: set[str],
    events: int,
    refs: dict[str, tuple[str, int, str]],
    problems: list[Problem],
    heads: list[SessionHead],
    check_blobs: bool,
) -> VerifyReport:
    """The store-wide checks after the chains: sessions deleted whole, blobs."""
    for session in witnessed.sessions():
        if session not in seen_sessions:
            check = StoreChainCheck(session, anchor=witnessed.anchor(session))
            problems.append(_gone(session, check))
    lost = witnessed.lost(seen_sessions)
    if lost is not None:
        problems.insert(0, lost)
    blob_count = len(refs)
    if check_blobs:
        problems += _check_blobs(app, refs)
        for digest in app.blobs.verify():
            if digest not in refs:  # referenced blobs were reported with their event above
                problems.append(
                    Problem(
                        "",
                        None,
                        BLOB_CORRUPT,
                        f"blob {digest} is corrupt: its content no longer matches its hash",
                    )
                )
        blob_count = max(blob_count, sum(1 for _ in app.blobs.digests()))
    return VerifyReport(
        target="--all",
        sessions=len(seen_sessions),
        events=events,
        blobs=blob_count,
        problems=tuple(problems),
        heads=tuple(heads),
    )


def verify_export(path: str | Path) -> VerifyReport:
    from coder_es.audit.export_jsonl import verify_jsonl

    return verify_jsonl(Path(path))
