"""Issue 34, point 2: ``coder-es acp`` shows the questions a parked turn waits for when the
editor loads the session (``_meta.coderEs.parkedQuestions`` and a message), and takes their
answers (``/approve``, ``/deny``), continuing the turn in that prompt turn."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path

from acp import text_block
from client_helpers import child_env, cli, kinds, make_workspace, run, stored_events
from scheduled_helpers import TURNS as SCHEDULED_TURNS
from scheduled_helpers import park_scheduled
from test_acp import WRITE_TURNS, EditorClient, agent, start

EXIT_WAITING = 3


def test_a_session_parked_by_another_process_is_shown_on_load_and_approved(
    tmp_path: Path,
) -> None:
    ws = make_workspace(tmp_path, "", WRITE_TURNS)
    script = str(tmp_path / "script.json")
    parked = subprocess.run(
        cli(ws, "run", "write the greeting", "--script", script, "--defer", "write"),
        env=child_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert parked.returncode == EXIT_WAITING, parked.stderr
    listed = subprocess.run(
        cli(ws, "pending", "--json"), env=child_env(tmp_path), capture_output=True, text=True
    )
    (question,) = [json.loads(line) for line in listed.stdout.splitlines()]
    sid, call = question["session"], question["call"]
    client = EditorClient()

    async def scenario() -> None:
        async with agent(client, ws, tmp_path) as (conn, _proc):
            await start(conn, fs=False)
            loaded = await conn.load_session(session_id=sid, cwd=str(ws), mcp_servers=[])
            (shown,) = loaded.field_meta["coderEs"]["parkedQuestions"]
            assert shown["call"] == call and shown["tool"] == "write"
            said = client.text()
            assert "waits for 1 answer" in said and call in said and "/approve" in said

            client.updates.clear()
            done = await conn.prompt(session_id=sid, prompt=[text_block(f"/approve {call}")])
            assert done.stop_reason == "end_turn"
            said = client.text()
            assert f"allowed `{call}` write" in said and "Done writing." in said
            assert client.questions == []  # answered by the command: nobody asked again

            client.updates.clear()
            await conn.prompt(session_id=sid, prompt=[text_block("/pending")])
            assert "No question of this session is waiting." in client.text()
            client.updates.clear()
            again = await conn.prompt(session_id=sid, prompt=[text_block(f"/deny {call}")])
            assert again.stop_reason == "end_turn"
            assert "already answered" in client.text()

    run(scenario())
    assert (ws / "hello.txt").read_text() == "hi\n"
    events = stored_events(ws, sid)
    assert kinds(events).count("UserMessageAdded") == 1  # the same turn, continued
    (answer,) = [e for e in events if type(e).__name__ == "DeferredAnswered"]
    assert answer.by["client"] == "coder-es acp"


def test_a_turn_that_parks_in_the_editor_is_denied_with_a_message(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path, '[permissions]\ndefer = ["write"]\n', WRITE_TURNS)
    client = EditorClient()

    async def scenario() -> str:
        async with agent(client, ws, tmp_path) as (conn, _proc):
            await start(conn, fs=False)
            sid = (await conn.new_session(cwd=str(ws), mcp_servers=[])).session_id
            first = await conn.prompt(session_id=sid, prompt=[text_block("write the greeting")])
            assert first.stop_reason == "end_turn"
            assert "waits for 1 answer" in client.text()
            assert client.questions == []  # parked, not asked
            client.updates.clear()
            await conn.prompt(session_id=sid, prompt=[text_block("/pending")])
            assert "waits for 1 answer" in client.text() and "/approve" in client.text()
            client.updates.clear()
            await conn.prompt(session_id=sid, prompt=[text_block('/deny --message "not here"')])
            assert "denied" in client.text() and "Done writing." in client.text()
            return str(sid)

    sid = run(scenario())
    assert not (ws / "hello.txt").exists()
    (done,) = [e for e in stored_events(ws, sid) if type(e).__name__ == "ToolCallCompleted"]
    assert done.is_error and "not here" in done.output


def test_a_scheduled_call_whose_time_has_come_runs_at_the_next_prompt(tmp_path: Path) -> None:
    """Parked on a scheduled call by a clock in 2020: loading the session says the call is due
    and runs at the next prompt; that prompt continues the parked turn first (its call runs,
    nobody is asked), then the prompt's own turn."""
    ws = make_workspace(tmp_path, "", SCHEDULED_TURNS)
    sid = run(park_scheduled(ws, tmp_path / "script.json", datetime(2020, 3, 1, 12, 0, tzinfo=UTC)))
    client = EditorClient()

    async def scenario() -> None:
        async with agent(client, ws, tmp_path) as (conn, _proc):
            await start(conn, fs=False)
            loaded = await conn.load_session(session_id=sid, cwd=str(ws), mcp_servers=[])
            (shown,) = loaded.field_meta["coderEs"]["parkedQuestions"]
            assert shown["scheduled_for"] == "2020-03-01T22:00:00+00:00"
            assert "due now: it runs at your next prompt" in client.text()
            assert not (ws / "night.txt").exists()

            client.updates.clear()
            done = await conn.prompt(session_id=sid, prompt=[text_block("and then?")])
            assert done.stop_reason == "end_turn"
            said = client.text()
            assert said.index("It ran.") < said.index("Next, then.")
            assert client.questions == []

    run(scenario())
    assert (ws / "night.txt").exists()
    events = stored_events(ws, sid)
    names = kinds(events)
    assert names.count("UserMessageAdded") == 2 and names.count("TurnResumed") == 1
    # The parked call ran (by the schedule), it was not abandoned by the new message.
    (ran,) = [e for e in events if type(e).__name__ == "ToolCallCompleted"]
    assert not ran.is_error
    assert names.index("TurnResumed") < names.index("ToolCallCompleted")
