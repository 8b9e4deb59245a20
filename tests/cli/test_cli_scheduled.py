"""Issue 34, point 4, through the CLI: ``run --schedule 'RULE@HH:MM-HH:MM'`` outside the window
parks the turn (exit 3) with the call scheduled for the window's next opening; ``pending``
shows the time; ``run --session S`` before it changes nothing. (The run at the window's opening
is tested with the loop's injected clock: tests/agent/test_scheduled_calls.py.)"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cli_helpers import Cli

EXIT_WAITING = 3


def test_a_call_scheduled_outside_its_window_parks_and_pending_shows_the_time(
    repo: Path, cli: Cli
) -> None:
    # A window that opens in two hours (UTC) and lasts one: now is outside it.
    start = datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(hours=2)
    window = f"{start:%H:%M}-{start + timedelta(hours=1):%H:%M}"
    call = {"type": "tool_use", "id": "b1", "name": "bash", "input": {"command": "echo deploy"}}
    turns = [{"blocks": [call]}, {"blocks": [{"type": "text", "text": "deployed"}]}]
    (repo / "turns.json").write_text(json.dumps({"turns": turns}))
    script = str(repo / "turns.json")

    r = cli("run", "deploy", "--script", script, "--schedule", f"bash:echo deploy*@{window}")
    assert r.code == EXIT_WAITING, r.err
    assert "scheduled for" in r.err
    (q,) = cli("pending", "--json").json_lines()
    assert q["call"] == "b1" and q["source"] == "schedule"
    due = datetime.fromisoformat(q["scheduled_for"])
    assert due == start
    shown = cli("pending")
    assert f"scheduled for {start:%Y-%m-%d %H:%M} UTC" in shown.out

    before = cli("show", q["session"], "--json").json_lines()
    again = cli("run", "--session", q["session"], "--script", script)
    assert again.code == EXIT_WAITING, again.err
    assert len(cli("show", q["session"], "--json").json_lines()) == len(before)

    bad = cli("run", "x", "--script", script, "--schedule", "bash:echo*@25:00-01:00")
    assert bad.code == 2 and "HH:MM-HH:MM" in bad.err and "Traceback" not in bad.err
