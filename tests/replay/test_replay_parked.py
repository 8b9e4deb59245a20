"""Issue 34, point 5: a session whose turn parked (``run --defer``), was answered from another
process call by call and resumed, replays identically in verify and live mode: the park is the
recorded answer at the question, and the answers and the resumption are the user's side,
replayed where they were recorded; no one is asked."""

from __future__ import annotations

import asyncio
from pathlib import Path

from replay_helpers import text, tool

from coder_es.application import CoderApp
from coder_es.permissions.rules import Rule
from coder_es.providers.scripted import ScriptedProvider
from coder_es.service.api import AgentService, SessionOptions, auto_answerer
from coder_es.service.waiting import answer
from coder_es.store.config import StoreConfig
from replay.cassette import dumps, export_session, loads
from replay.engine import ReplayOptions, replay_cassette

ASK_WRITES = SessionOptions(rules=(Rule("write", None, "ask"),))


def _record(workspace: Path, store: StoreConfig) -> str:
    turns = [
        {
            "blocks": [
                text("Writing two files."),
                {**tool("write", path="a.txt", content="a\n"), "id": "w1"},
                {**tool("read", path="seed.txt"), "id": "r1"},
                {**tool("write", path="b.txt", content="b\n"), "id": "w2"},
            ]
        },
        {"blocks": [text("One written, one refused.")]},
    ]
    (workspace / "seed.txt").write_text("seed\n")

    def service(app: CoderApp) -> AgentService:
        provider = ScriptedProvider(list(turns))
        return AgentService(app, workspace, provider_factory=lambda _n, _m: provider)

    async def park() -> str:
        app = CoderApp(store)
        try:
            handle = await service(app).create_session(ASK_WRITES)
            async for _u in handle.send("write a and b", answerer=auto_answerer(False, True)):
                pass
            await handle.close()
            assert handle.outcome is not None and handle.outcome.reason == "waiting"
            return handle.id
        finally:
            app.close()

    def answered(call: str, decision: str, message: str | None = None) -> None:
        other = CoderApp(store)  # another process's view of the store
        try:
            by = {"client": "coder-es approve", "host": "elsewhere", "pid": 4242}
            answer(other, sid, [call], decision=decision, by=by, message=message)
        finally:
            other.close()

    async def resume(expected: str) -> None:
        app = CoderApp(store)
        try:
            handle = await service(app).open_session(sid, ASK_WRITES)
            async for _u in handle.resume(answerer=auto_answerer(False, True)):
                pass
            await handle.close()
            assert handle.outcome is not None and handle.outcome.reason == expected
        finally:
            app.close()

    sid = asyncio.run(park())
    answered("w1", "allow")
    asyncio.run(resume("waiting"))  # w1 runs; w2 still waits
    answered("w2", "deny", "not b, please")
    # The provider of a resume starts from its first response: only the last turn is asked.
    turns.pop(0)
    asyncio.run(resume("end_turn"))
    return sid


def test_a_parked_and_resumed_session_replays_identically(workspace: Path, tmp_path: Path) -> None:
    store = StoreConfig("sqlite", tmp_path / "store")
    sid = _record(workspace, store)
    assert (workspace / "a.txt").read_text() == "a\n"
    assert not (workspace / "b.txt").exists()
    app = CoderApp(store)
    try:
        cassette = loads(dumps(export_session(app, sid)), "parked.cassette.jsonl")
    finally:
        app.close()
    kinds = [e.kind for e in cassette.events]
    assert kinds.count("PermissionDeferred") == 2
    assert kinds.count("TurnParked") == 2
    assert kinds.count("DeferredAnswered") == 2
    assert kinds.count("TurnResumed") == 2

    for mode in ("verify", "live"):
        report = replay_cassette(cassette, ReplayOptions(mode=mode))
        assert report.ok, f"{mode}: {report.render()}"
        assert report.replayed_events == len(cassette.events)
