"""Deterministic replay of harness sessions (a session run by Claude Code, Codex, Gemini CLI or
an ACP agent: ``coder_es.harness``).

- verify mode: each turn's recorded stream (``HarnessRan.stream_blob``, the CLI's own output)
  goes through the current adapter and turn recorder again (``HarnessTurn.decode_recorded``), no
  harness runs; what that records is compared with what the turn recorded: the model's
  responses, the tool calls with their inputs and outputs, the harness's own denials.
- live mode: the REAL harness CLI runs each recorded prompt again, in a scratch workspace
  restored to the session's start, pointed at the recording proxy, which serves the recorded
  model answers instead of calling the model (``coder_es.harness.serve``: each request is matched
  to the recorded one; one that differs is the first divergence, with both bodies and a diff).
  After each turn, what the replayed turn recorded (its calls, their outputs and file effects,
  permission decisions) is compared with the recording: a different tool result or file is a
  divergence too. This is how a user regression-tests an agent set-up (an instructions file,
  MCP servers, hooks, a new CLI version) against sessions recorded with the old one.

Comparisons are made under ``replay.normalize`` (the workspace path) with the tool calls' ids
numbered in order of appearance (some CLIs make them from a clock) and without durations.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from uuid import uuid4

from coder_es.domain.session import Session
from coder_es.errors import CoderESError
from coder_es.harness.serve import RecordedExchange, RequestMismatch, RequestNormalizer
from coder_es.records import event_fields, event_kind
from coder_es.workspace.confined import ConfinedDir
from replay.cassette import Cassette, RecordedEvent
from replay.normalize import Normalizer
from replay.report import Divergence, ReplayReport, contrast, diff_values, first_difference, lookup

if TYPE_CHECKING:
    from coder_es.agent.settings import RecordedHarness


class CannotReplay(CoderESError):
    """The replay could not run at all (no harness CLI, no sandbox...): one line why."""


def is_harness_cassette(cassette: Cassette) -> bool:
    return bool((cassette.started.fields.get("settings") or {}).get("harness"))


@dataclass(frozen=True)
class RecordedTurn:
    index: int  # 1-based
    prompt: str
    events: tuple[RecordedEvent, ...]
    """From its ``UserMessageAdded`` to its ``HarnessRan``."""
    ran: RecordedEvent | None

    @property
    def exchanges(self) -> list[RecordedEvent]:
        return [e for e in self.events if e.kind == "ModelExchanged"]

    @property
    def yes(self) -> bool:
        if self.ran is not None and self.ran.fields.get("yes") is not None:
            return bool(self.ran.fields["yes"])
        # Recorded before --yes was: a decision by our rules means Claude Code asked (no --yes).
        return not any(
            e.kind == "PermissionDecided" and e.fields.get("decided_by") == "rule"
            for e in self.events
        )


def recorded_turns(events: Iterable[RecordedEvent]) -> list[RecordedTurn]:
    out: list[RecordedTurn] = []
    current: list[RecordedEvent] | None = None
    for e in events:
        if e.kind == "UserMessageAdded":
            current = [e]
        elif current is not None:
            current.append(e)
            if e.kind == "HarnessRan":
                out.append(_turn(len(out) + 1, current, e))
                current = None
    if current:
        out.append(_turn(len(out) + 1, current, None))
    return out


def _turn(index: int, events: list[RecordedEvent], ran: RecordedEvent | None) -> RecordedTurn:
    content = events[0].fields.get("content") or []
    prompt = "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return RecordedTurn(index, prompt, tuple(events), ran)


def recorded_harness(cassette: Cassette) -> RecordedHarness:
    """The harness the session was recorded with (``RecordedHarness``)."""
    from coder_es.agent.settings import RecordedHarness

    recorded = RecordedHarness.of(cassette.started.fields["settings"]["harness"])
    if recorded is None:
        raise CannotReplay("the cassette's harness record names no harness")
    return recorded


# ---------------------------------------------------------------------- comparable form

_COMPARED: dict[str, tuple[str, ...]] = {
    "ModelResponded": ("blocks", "stop_reason"),
    "ToolCallRequested": ("tool_use_id", "name", "input"),
    "ToolCallCompleted": ("tool_use_id", "name", "output", "is_error"),
    "PermissionDecided": ("tool_use_id", "tool", "decision", "decided_by"),
}


def comparable(
    items: Iterable[tuple[int, str, dict[str, Any]]], norm: Normalizer, *, live: bool
) -> list[tuple[int, dict[str, Any]]]:
    """(version, compared fields) of the events a turn's stream decides, in order.

    Verify mode compares what the stream alone decides: no file effects, and of permission
    decisions only the harness's own denials (``client``). Calls the apply made up
    (``harness_files``) are not the stream's."""
    ids: dict[str, str] = {}

    def call_id(value: Any) -> str:
        return ids.setdefault(str(value), f"call-{len(ids) + 1}")

    out: list[tuple[int, dict[str, Any]]] = []
    for version, kind, fields in items:
        keys = _COMPARED.get(kind)
        if keys is None:
            continue
        if kind == "PermissionDecided" and not live and fields.get("decided_by") != "client":
            continue
        if fields.get("name") == "harness_files":
            continue
        if kind == "ModelResponded" and all(
            b.get("name") == "harness_files" for b in fields.get("blocks") or [{}]
        ):
            continue
        value = {k: fields.get(k) for k in keys}
        if "tool_use_id" in value:
            value["tool_use_id"] = call_id(value["tool_use_id"])
        if kind == "ModelResponded":
            value["blocks"] = [
                {**b, "id": call_id(b["id"])} if b.get("type") == "tool_use" and "id" in b else b
                for b in value["blocks"] or []
            ]
        out.append((version, {"kind": kind, **norm.value(value)}))
    if live:
        out.append(_file_effects(items, norm))
    return out


def _file_effects(
    items: Iterable[tuple[int, str, dict[str, Any]]], norm: Normalizer
) -> tuple[int, dict[str, Any]]:
    """What the turn did to the files, per path (first ``before``, last ``after``), as one
    item at its end. Per call it is not compared: which call a change is attributed to
    depends on when the stream is read against when the harness writes (a replay served at
    once runs ahead of it), while the turn's effect does not."""
    effects: dict[str, dict[str, Any]] = {}
    last = 0
    for version, kind, fields in items:
        last = max(last, version)
        if kind != "ToolCallCompleted":
            continue
        for c in fields.get("files_changed") or []:
            if isinstance(c, dict) and isinstance(c.get("path"), str):
                seen = effects.setdefault(c["path"], {"before": c.get("before")})
                seen["after"] = c.get("after")
    changed = {p: e for p, e in sorted(effects.items()) if e["before"] != e["after"]}
    return last, {"kind": "files", "changes": norm.value(changed)}


def first_divergence(
    turn: RecordedTurn,
    expected: Sequence[tuple[int, dict[str, Any]]],
    actual: Sequence[tuple[int, dict[str, Any]]],
    who: str,
) -> Divergence | None:
    for i in range(max(len(expected), len(actual))):
        want = expected[i][1] if i < len(expected) else None
        got = actual[i][1] if i < len(actual) else None
        if want == got:
            continue
        step = expected[i][0] if i < len(expected) else (turn.events[-1].version)
        kind = str((want or got or {}).get("kind"))
        if want is None:
            summary = f"turn {turn.index}: {who} records an extra {kind} ({_brief(got)})"
            what = "extra"
        elif got is None:
            summary = f"turn {turn.index}: {who} stops before the recorded {kind} ({_brief(want)})"
            what = "missing"
        else:
            where = first_difference(want, got) or "value"
            a, b = contrast(lookup(want, where), lookup(got, where))
            summary = f"turn {turn.index}, step {step} ({kind}): {where} was {a}, now {b}"
            what = "event"
        return Divergence(step, kind, what, want, got, diff_values(want, got), summary)
    return None


def _brief(value: dict[str, Any] | None) -> str:
    if not value:
        return ""
    for key in ("name", "tool", "stop_reason"):
        if key in value:
            return f"{key} {value[key]!r}"
    return ""


def _domain_items(events: Iterable[Any]) -> list[tuple[int, str, dict[str, Any]]]:
    return [(int(e.originator_version), event_kind(e), event_fields(e)) for e in events]


def _recorded_items(events: Iterable[RecordedEvent]) -> list[tuple[int, str, dict[str, Any]]]:
    return [(e.version, e.kind, e.fields) for e in events]


# ---------------------------------------------------------------------- verify


async def verify(cassette: Cassette, started_at: float) -> ReplayReport:
    from coder_es.harness.adapters import ADAPTERS
    from coder_es.harness.spec import HarnessSpec
    from coder_es.harness.turn import HarnessTurn

    # No harness runs: the recorded streams are decoded by the recorded kind's adapter.
    recorded = recorded_harness(cassette)
    spec = HarnessSpec(recorded.name, recorded.kind, recorded.command)
    norm = Normalizer.for_workspace(cassette.workspace)
    notes: list[str] = []
    compared = calls = 0
    divergence = None
    for turn in recorded_turns(cassette.events):
        blob = turn.ran.fields.get("stream_blob") if turn.ran is not None else None
        if not blob:
            notes.append(f"turn {turn.index}: no stream recorded (an ACP agent's, or older)")
            continue
        decoder = HarnessTurn(
            store=cast(Any, None),
            session_id=uuid4(),
            workspace=Path(cassette.workspace),
            spec=spec,
            adapter=ADAPTERS[spec.kind](),
            command=[],
            emit=lambda _update: None,
        )
        outcome = turn.ran.fields.get("outcome") if turn.ran is not None else None
        ops = await decoder.decode_recorded(cassette.blob(blob), outcome == "cancelled")
        session = Session.start(workspace=cassette.workspace, provider=f"harness:{spec.name}")
        for op in ops:
            op(session)
        produced = [e for e in session.collect_events() if event_kind(e) != "Started"]
        expected = comparable(_recorded_items(turn.events), norm, live=False)
        actual = comparable(_domain_items(produced), norm, live=False)
        compared += len(expected)
        calls += sum(1 for _v, f in expected if f["kind"] == "ToolCallRequested")
        divergence = first_divergence(turn, expected, actual, "the current decoder")
        if divergence is not None:
            break
    return _report(cassette, "verify", started_at, compared, 0, calls, divergence, None, notes)


def _report(
    cassette: Cassette,
    mode: str,
    started_at: float,
    compared: int,
    model_calls: int,
    tool_calls: int,
    divergence: Divergence | None,
    workspace: str | None,
    notes: list[str],
) -> ReplayReport:
    return ReplayReport(
        cassette=cassette.name,
        mode=mode,
        session=cassette.session,
        recorded_events=len(cassette.events),
        replayed_events=compared,
        model_calls=model_calls,
        tool_calls=tool_calls,
        elapsed_s=time.perf_counter() - started_at,
        recorded_wall_s=cassette.recorded_wall_s,
        divergence=divergence,
        workspace=workspace,
        notes=tuple(notes),
    )


# ---------------------------------------------------------------------- live


def exchanges_of(cassette: Cassette, turn: RecordedTurn) -> list[RecordedExchange]:
    return [
        RecordedExchange(
            version=e.version,
            method=str(e.fields["method"]),
            path=str(e.fields["path"]),
            request=cassette.blob(str(e.fields["request_blob"])),
            status=int(e.fields["status"]),
            response_headers=dict(e.fields.get("response_headers") or {}),
            response=cassette.blob(str(e.fields["response_blob"])),
        )
        for e in turn.exchanges
    ]


def request_divergence(
    turn: RecordedTurn, mismatch: RequestMismatch, normalizer: RequestNormalizer, served: int
) -> Divergence:
    actual = {
        "method": mismatch.method,
        "path": mismatch.path,
        "body": normalizer.shown(mismatch.body),
    }
    x = mismatch.expected
    expected = (
        None
        if x is None
        else {"method": x.method, "path": x.path, "body": normalizer.shown(x.request)}
    )
    n = served + 1
    if expected is None:
        summary = (
            f"turn {turn.index}: the harness made a model request ({mismatch.method} "
            f"{mismatch.path}) after the {served} the recording has"
        )
        return Divergence(
            turn.events[-1].version,
            "ModelExchanged",
            "extra",
            None,
            actual,
            diff_values(None, actual),
            summary,
        )
    where = first_difference(expected, actual) or "body"
    a, b = contrast(lookup(expected, where), lookup(actual, where))
    summary = (
        f"turn {turn.index}, model request {n} (step {x.version if x else '?'}): the harness's "
        f"request differs from the recording at {where}: was {a}, now {b}"
    )
    return Divergence(
        x.version if x else 0,
        "ModelExchanged",
        "request",
        expected,
        actual,
        diff_values(expected, actual),
        summary,
    )


def restore_start(cassette: Cassette, root: Path) -> None:
    """The scratch workspace as the session found it (the cassette's initial files)."""
    root.mkdir(parents=True, exist_ok=True)
    with ConfinedDir(root) as confined:
        for path, digest in cassette.files.items():
            if digest is None:
                continue
            with contextlib.suppress(OSError, CoderESError):
                confined.path(path, create=True).write_bytes(cassette.blob(digest))


async def live(
    cassette: Cassette,
    started_at: float,
    *,
    workspace: Path | None = None,
    keep_workspace: bool = False,
    network: bool | None = None,
    harnesses: Mapping[str, Mapping[str, Any]] | None = None,
) -> ReplayReport:
    from coder_es.agent.settings import rules_from_records
    from coder_es.domain.settings import RecordedSettings
    from coder_es.errors import UsageError
    from coder_es.harness.runner import HarnessSession
    from coder_es.harness.serve import ServingUpstream
    from coder_es.harness.spec import continuing
    from coder_es.harness.turn import HarnessFailed
    from replay.app import ReplayApp

    moves = [e for e in cassette.events if e.kind in ("HeadMoved", "WorkspaceRestored")]
    if moves or cassette.ancestors:
        msg = (
            "live replay of a harness session replays its turns in order; this one moves its "
            f"head or was forked (step {moves[0].version if moves else 1}): use --mode verify"
        )
        raise CannotReplay(msg)
    # The harness runs as ``run --session`` would continue the session: its configured entry
    # now, ``env`` included. The recording has the env's names only (values may be
    # credentials): a value changed since shows in the replayed requests, as any change of
    # the set-up does (docs/harness.md).
    try:
        spec, changed = continuing(cassette.session, recorded_harness(cassette), None, harnesses)
    except UsageError as e:
        raise CannotReplay(str(e)) from None
    # The scratch workspace has the recorded one's name: CLIs show it (Gemini CLI names its
    # project's temporary directory after it).
    name = Path(cassette.workspace).name or "workspace"
    base = Path(tempfile.mkdtemp(prefix="coder-es-replay-"))
    root = (workspace or base / name).resolve()
    restore_start(cassette, root)
    norm = Normalizer.for_workspace(cassette.workspace, root)
    requests = RequestNormalizer.for_paths(
        spec.kind, cassette.workspace, str(root), str(Path(cassette.workspace).resolve())
    )
    app = ReplayApp(None)
    recorded_root = cassette.workspace.rstrip("/").encode()
    moved = (recorded_root, str(root).encode()) if recorded_root != str(root).encode() else None
    notes: list[str] = [changed] if changed else []
    compared = served_total = calls = 0
    divergence: Divergence | None = None
    match_ms: list[float] = []
    startup = 0.0
    try:
        # The session's own rules and default (its Started settings): decided as recorded.
        recorded_settings = RecordedSettings(started=cassette.started.fields.get("settings") or {})
        records, default = recorded_settings.permission_records()
        session = HarnessSession.create(
            app,
            root,
            spec,
            agent=str(cassette.started.fields.get("agent") or "build"),
            network=network,
            rules=rules_from_records(records),
            default_permission=default,
        )
        seen = 0
        recorded_version = (cassette.started.fields.get("settings") or {}).get("harness", {})
        for turn in recorded_turns(cassette.events):
            exchanges = exchanges_of(cassette, turn)
            upstream = ServingUpstream(
                exchanges,
                requests,
                on_mismatch=lambda _m: session.cancel(),
                moved=moved,
            )
            session.serve = upstream
            session.yes = turn.yes
            turn_started = time.perf_counter()
            try:
                async for _update in session.send(turn.prompt):
                    pass
            except (UsageError, HarnessFailed) as e:
                raise CannotReplay(str(e)) from e
            match_ms += upstream.match_ms
            if upstream.first_at is not None:
                startup += upstream.first_at - turn_started
            served_total += len(upstream.served)
            events = app.session_events(session.session_id)
            mine = [e for e in events[seen:] if event_kind(e) != "Started"]
            seen = len(events)
            if turn.index == 1 and recorded_version.get("version"):
                now = (session.outcome.version if session.outcome else None) or ""
                if now and now != recorded_version.get("version"):
                    notes.append(
                        f"recorded with {spec.name} {recorded_version['version']}, "
                        f"replayed with {now}"
                    )
            if upstream.mismatch is not None:
                divergence = request_divergence(
                    turn, upstream.mismatch, requests, len(upstream.served)
                )
                break
            expected = comparable(_recorded_items(turn.events), norm, live=True)
            actual = comparable(_domain_items(mine), norm, live=True)
            compared += len(expected)
            calls += sum(1 for _v, f in actual if f["kind"] == "ToolCallRequested")
            divergence = first_divergence(turn, expected, actual, "the replayed harness")
            if divergence is None and upstream.unserved:
                x = upstream.unserved[0]
                divergence = Divergence(
                    x.version,
                    "ModelExchanged",
                    "missing",
                    {"method": x.method, "path": x.path, "body": requests.shown(x.request)},
                    None,
                    "",
                    f"turn {turn.index}: the harness made {len(upstream.served)} model "
                    f"request(s); the recording has {len(exchanges)}",
                )
            if divergence is not None:
                break
    finally:
        app.close()
        if workspace is not None or not keep_workspace:
            await asyncio.to_thread(shutil.rmtree, base, True)
    notes.append(f"the harness's start-up (to its first request, all turns): {startup:.3f} s")
    if match_ms:
        ordered = sorted(match_ms)
        notes.append(
            f"{len(ordered)} request(s) matched, median {ordered[len(ordered) // 2]:.3f} ms"
        )
    return _report(
        cassette,
        "live",
        started_at,
        compared,
        served_total,
        calls,
        divergence,
        str(root) if keep_workspace or workspace is not None else None,
        notes,
    )


async def areplay_harness(
    cassette: Cassette,
    mode: str,
    *,
    workspace: Path | None = None,
    keep_workspace: bool = False,
    network: bool | None = None,
    harnesses: Mapping[str, Mapping[str, Any]] | None = None,
) -> ReplayReport:
    """``harnesses``: the configuration's ``[harnesses]`` (live mode runs the recorded one as
    configured now)."""
    started_at = time.perf_counter()
    if mode == "verify":
        return await verify(cassette, started_at)
    return await live(
        cassette,
        started_at,
        workspace=workspace,
        keep_workspace=keep_workspace,
        network=network,
        harnesses=harnesses,
    )
