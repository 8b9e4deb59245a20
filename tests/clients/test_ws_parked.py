"""Issue 34, point 2: ``coder-es serve`` shows the questions a parked turn waits for when a
client opens the session, and takes their answers (``answer_parked``), continuing the turn."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import websockets
from client_helpers import child_env, cli, kinds, make_workspace, run, serve_process, stored_events
from scheduled_helpers import TURNS as SCHEDULED_TURNS
from scheduled_helpers import park_scheduled
from test_ws import ASK_BASH, TURNS, recv, send, until

EXIT_WAITING = 3


def _cli(ws_dir: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cli(ws_dir, *args),
        env=child_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_session_parked_by_another_process_is_answered_over_the_socket(tmp_path: Path) -> None:
    ws_dir = make_workspace(tmp_path, ASK_BASH, TURNS)
    script = str(tmp_path / "script.json")
    parked = _cli(ws_dir, tmp_path, "run", "make out.txt", "--script", script, "--defer", "bash")
    assert parked.returncode == EXIT_WAITING, parked.stderr
    listed = _cli(ws_dir, tmp_path, "pending", "--json")
    (question,) = [json.loads(line) for line in listed.stdout.splitlines()]
    sid, call = question["session"], question["call"]
    assert not (ws_dir / "out.txt").exists()

    async def scenario() -> None:
        async with (
            serve_process(ws_dir, tmp_path) as (url, _proc),
            websockets.connect(f"{url}&session={sid}") as ws,
        ):
            hello = await recv(ws)
            assert hello["type"] == "connected" and hello["session_id"] == sid
            (shown,) = hello["parked_questions"]
            assert shown["call"] == call and shown["tool"] == "bash"
            assert shown["subject"] == "echo hello > out.txt"
            assert shown["asked_by"]["client"]  # who parked it, from where
            await send(ws, type="get_state", id="s")
            state = await until(ws, "state", [])
            assert [q["call"] for q in state["parked_questions"]] == [call]
            # An unknown call is refused with one line; nothing is recorded.
            await send(ws, type="answer_parked", id=1, tool_use_ids=["nope"], decision="allow")
            refused = await until(ws, "error", [])
            assert refused["code"] == "not_waiting" and refused["re"] == 1
            await send(ws, type="answer_parked", id=2, tool_use_ids=[call], decision="allow")
            answered = await until(ws, "answered", [])
            assert answered["re"] == 2 and [q["call"] for q in answered["answered"]] == [call]
            seen: list[dict[str, Any]] = []
            done = await until(ws, "finished", seen)
            assert done["reason"] == "end_turn"
            types = [m["type"] for m in seen]
            assert types.index("tool_completed") < types.index("model_response")
            # Answered already: a clear error naming who answered.
            await send(ws, type="answer_parked", id=3, tool_use_ids=[call], decision="deny")
            again = await until(ws, "error", [])
            assert again["code"] == "not_waiting" and "already answered" in again["message"]
            await send(ws, type="get_state", id="s2")
            assert (await until(ws, "state", []))["parked_questions"] == []

    run(scenario())
    assert (ws_dir / "out.txt").read_text() == "hello\n"
    events = stored_events(ws_dir, sid)
    names = kinds(events)
    assert names.count("UserMessageAdded") == 1  # the same turn, continued
    (answer,) = [e for e in events if type(e).__name__ == "DeferredAnswered"]
    assert answer.by["client"] == "coder-es serve" and answer.decision == "allow"


def test_a_turn_over_the_socket_parks_and_a_deny_with_a_reason_reaches_the_model(
    tmp_path: Path,
) -> None:
    ws_dir = make_workspace(tmp_path, '[permissions]\ndefer = ["bash"]\n', TURNS)

    async def scenario() -> str:
        async with serve_process(ws_dir, tmp_path) as (url, _proc), websockets.connect(url) as ws:
            hello = await recv(ws)
            assert hello["parked_questions"] == []
            await send(ws, type="send_message", text="make out.txt")
            seen: list[dict[str, Any]] = []
            done = await until(ws, "finished", seen)
            assert done["reason"] == "waiting"
            (deferred,) = [m for m in seen if m["type"] == "tool_deferred"]
            (waiting,) = [m for m in seen if m["type"] == "waiting"]
            assert waiting["tool_use_ids"] == [deferred["tool_use_id"]]
            assert "awaiting_approval" not in [m["type"] for m in seen]
            await send(ws, type="answer_parked", decision="deny", reason="not today, thanks")
            await until(ws, "answered", [])
            seen = []
            done = await until(ws, "finished", seen)
            assert done["reason"] == "end_turn"
            (err,) = [m for m in seen if m["type"] == "tool_error"]
            assert "not today, thanks" in err["output"]
            return str(hello["session_id"])

    sid = run(scenario())
    assert not (ws_dir / "out.txt").exists()
    decided = [e for e in stored_events(ws_dir, sid) if type(e).__name__ == "PermissionDecided"]
    assert decided[-1].decided_by == "user" and decided[-1].reason == "not today, thanks"


def test_a_scheduled_call_whose_time_has_come_runs_when_a_client_opens_the_session(
    tmp_path: Path,
) -> None:
    """Parked on a scheduled call by a clock in 2020: for the server's clock the window opened
    long ago. Opening the session shows the call with its time and continues the turn at once
    (nobody answers); one scheduled for 2040 is shown and left waiting."""
    ws_dir = make_workspace(tmp_path, "", SCHEDULED_TURNS)
    script = tmp_path / "script.json"
    sid = run(park_scheduled(ws_dir, script, datetime(2020, 3, 1, 12, 0, tzinfo=UTC)))
    later = run(park_scheduled(ws_dir, script, datetime(2040, 3, 1, 12, 0, tzinfo=UTC)))
    assert not (ws_dir / "night.txt").exists()

    async def scenario() -> None:
        async with serve_process(ws_dir, tmp_path) as (url, _proc):
            async with websockets.connect(f"{url}&session={later}") as ws:
                hello = await recv(ws)
                (shown,) = hello["parked_questions"]
                assert shown["scheduled_for"] == "2040-03-01T22:00:00+00:00"
                await send(ws, type="get_state", id="s")
                state = await until(ws, "state", [])
                assert not state["running"] and len(state["parked_questions"]) == 1
            async with websockets.connect(f"{url}&session={sid}") as ws:
                hello = await recv(ws)
                (shown,) = hello["parked_questions"]
                assert shown["scheduled_for"] == "2020-03-01T22:00:00+00:00"
                seen: list[dict[str, Any]] = []
                done = await until(ws, "finished", seen)
                assert done["reason"] == "end_turn"
                types = [m["type"] for m in seen]
                assert types.index("tool_completed") < types.index("model_response")

    run(scenario())
    assert (ws_dir / "night.txt").exists()
    names = kinds(stored_events(ws_dir, sid))
    assert names.count("UserMessageAdded") == 1 and names.count("TurnResumed") == 1
    (ran,) = [e for e in stored_events(ws_dir, sid) if type(e).__name__ == "PermissionDecided"]
    assert ran.decided_by == "schedule"
    assert "TurnResumed" not in kinds(stored_events(ws_dir, later))
