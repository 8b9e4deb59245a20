"""Issue 34, point 4: a ``schedule`` rule runs a call in its time window. Outside the window the
call is recorded as scheduled for the window's next opening and the turn parks; a resume before
that time changes nothing; once the injected clock reaches the window, a resume runs the call
and continues the same turn. Replayed (verify and live), the session decides the same."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from coder_es.application import CoderApp
from coder_es.cli.questions import _line
from coder_es.permissions.rules import RuleSyntaxError, parse_rule
from coder_es.permissions.schedule import Window
from coder_es.providers.scripted import ScriptedProvider
from coder_es.service.api import AgentService, SessionOptions
from coder_es.service.waiting import pending
from coder_es.store.config import StoreConfig
from replay.cassette import dumps, export_session, loads
from replay.engine import ReplayOptions, replay_cassette

RULE = parse_rule("bash:echo deployed*@22:00-06:00", "schedule")
TURNS: list[dict[str, Any]] = [
    {
        "blocks": [
            {"type": "text", "text": "Deploying."},
            {
                "type": "tool_use",
                "id": "d1",
                "name": "bash",
                "input": {"command": "echo deployed"},
            },
        ]
    },
    {"blocks": [{"type": "text", "text": "Deployed."}]},
]


class SetClock:
    """The loop's clock, set by the test (the wall time a window is checked against)."""

    def __init__(self, now: datetime) -> None:
        self.at = now

    def monotonic(self) -> float:
        return 0.0

    def now(self) -> datetime:
        return self.at

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(0)


def _service(app: CoderApp, ws: Path, clock: SetClock, turns: list[dict[str, Any]]) -> AgentService:
    provider = ScriptedProvider(list(turns))
    return AgentService(app, ws, provider_factory=lambda _n, _m: provider, clock=clock)


async def _drain(stream: Any) -> None:
    async for _u in stream:
        pass


def test_windows_open_and_wrap_midnight() -> None:
    night = Window.parse("22:00-06:00")
    assert night.contains(datetime(2026, 1, 1, 23, 30, tzinfo=UTC))
    assert night.contains(datetime(2026, 1, 2, 5, 59, tzinfo=UTC))
    assert not night.contains(datetime(2026, 1, 2, 6, 0, tzinfo=UTC))
    noon = datetime(2026, 1, 2, 12, 0, tzinfo=UTC)
    assert night.next_opening(noon) == datetime(2026, 1, 2, 22, 0, tzinfo=UTC)
    assert Window.parse("09:00-17:00").next_opening(datetime(2026, 1, 2, 18, 0, tzinfo=UTC)) == (
        datetime(2026, 1, 3, 9, 0, tzinfo=UTC)
    )
    assert Window.parse("00:00-00:00").contains(noon)
    assert RULE.describe() == "user:schedule bash:echo deployed*@22:00-06:00"
    for bad in ("bash:make*", "bash:make*@25:00-01:00", "@22:00-06:00"):
        with pytest.raises(RuleSyntaxError):
            parse_rule(bad, "schedule")


def test_a_scheduled_call_runs_when_the_clock_reaches_its_window(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    store = StoreConfig("sqlite", tmp_path / "store")
    clock = SetClock(datetime(2026, 3, 1, 12, 0, tzinfo=UTC))
    options = SessionOptions(rules=(RULE,))

    async def turn(resume: str | None) -> tuple[str, str]:
        app = CoderApp(store)
        try:
            service = _service(app, ws, clock, TURNS if resume is None else TURNS[1:])
            if resume is None:
                handle = await service.create_session(options)
                await _drain(handle.send("deploy tonight"))
            else:
                handle = await service.open_session(resume, options)
                await _drain(handle.resume())
            await handle.close()
            assert handle.outcome is not None
            return handle.id, handle.outcome.reason
        finally:
            app.close()

    sid, reason = asyncio.run(turn(None))
    assert reason == "waiting"
    app = CoderApp(store)
    try:
        (question,) = pending(app)
        version = app.last_version(app.resolve_session(sid))
    finally:
        app.close()
    assert question.call == "d1" and question.source == "schedule"
    assert question.scheduled_for == "2026-03-01T22:00:00+00:00"
    assert "scheduled for 2026-03-01 22:00 UTC" in _line(question)

    # Before the window: the resume records nothing and parks again.
    clock.at = datetime(2026, 3, 1, 21, 59, tzinfo=UTC)
    assert asyncio.run(turn(sid)) == (sid, "waiting")
    app = CoderApp(store)
    try:
        assert app.last_version(app.resolve_session(sid)) == version
    finally:
        app.close()

    # The window opens: the call runs and the same turn continues to its end.
    clock.at = datetime(2026, 3, 1, 22, 0, tzinfo=UTC)
    assert asyncio.run(turn(sid)) == (sid, "end_turn")
    app = CoderApp(store)
    try:
        events = app.session_events(app.resolve_session(sid))
        assert pending(app) == []
        cassette = loads(dumps(export_session(app, sid)), "scheduled.cassette.jsonl")
    finally:
        app.close()
    names = [type(e).__name__ for e in events]
    assert names.count("UserMessageAdded") == 1 and names.count("TurnResumed") == 1
    (ran,) = [e for e in events if type(e).__name__ == "ToolCallCompleted"]
    assert ran.output.strip().startswith("deployed") and not ran.is_error
    (answered,) = [e for e in events if type(e).__name__ == "DeferredAnswered"]
    assert answered.by["client"] == "schedule"
    decided = [e for e in events if type(e).__name__ == "PermissionDecided"]
    assert decided[-1].decided_by == "schedule" and decided[-1].decision == "allow"

    for mode in ("verify", "live"):
        report = replay_cassette(cassette, ReplayOptions(mode=mode))
        assert report.ok, f"{mode}: {report.render()}"


def test_inside_its_window_a_scheduled_call_runs_at_once(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    app = CoderApp()
    clock = SetClock(datetime(2026, 3, 1, 23, 0, tzinfo=UTC))

    async def go() -> str:
        handle = await _service(app, ws, clock, TURNS).create_session(SessionOptions(rules=(RULE,)))
        await _drain(handle.send("deploy now"))
        await handle.close()
        assert handle.outcome is not None and handle.outcome.reason == "end_turn"
        return handle.id

    try:
        sid = asyncio.run(go())
        events = app.session_events(app.resolve_session(sid))
        cassette = loads(dumps(export_session(app, sid)), "in-window.cassette.jsonl")
    finally:
        app.close()
    report = replay_cassette(cassette, ReplayOptions(mode="verify"))
    assert report.ok, report.render()
    (ran,) = [e for e in events if type(e).__name__ == "ToolCallCompleted"]
    assert ran.output.strip().startswith("deployed")
    (decided,) = [e for e in events if type(e).__name__ == "PermissionDecided"]
    assert decided.decided_by == "schedule" and "window 22:00-06:00 is open" in decided.reason
    assert "TurnParked" not in [type(e).__name__ for e in events]
