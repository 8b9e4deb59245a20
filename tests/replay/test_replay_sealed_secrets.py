"""Replay of a session whose store sealed secrets: the cassette carries none, and replays.

The recorded session wrote a key, ran a command with one and was told one by the user. The
cassette holds only markers; verify mode replays it identically; live mode resolves an
``env:NAME`` marker from the current environment and names the step that needs a secret the
cassette does not carry.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from replay_helpers import record_session, text, tool

from coder_es.redaction import Redactor
from replay.cassette import dumps, export_session, loads
from replay.engine import ReplayOptions, replay_cassette

AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
TOKEN = "q8Zr2LmX0vT4kP9sW3nB"


def test_a_sealed_session_replays_from_a_cassette_without_its_secrets(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEPLOY_TOKEN", TOKEN)
    app, sid = record_session(
        workspace,
        {"notes.md": "# notes\n"},
        [
            [tool("write", path="conf.py", content=f'KEY = "{AWS_KEY}"\n')],
            [tool("bash", command=f"echo token={TOKEN}")],
            [text("done")],
        ],
        f"configure with {AWS_KEY}",
    )
    # The loop ran on the real values: the file holds the key.
    assert (workspace / "conf.py").read_text() == f'KEY = "{AWS_KEY}"\n'
    cassette = export_session(app, sid, redactor=Redactor.from_rules([]))
    app.close()
    raw = dumps(cassette)
    assert AWS_KEY not in raw and TOKEN not in raw
    assert "[REDACTED:env:DEPLOY_TOKEN:" in raw and "[REDACTED:pattern:aws_access_key:" in raw
    reloaded = loads(raw, "sealed.cassette.jsonl")
    report = replay_cassette(reloaded, ReplayOptions(mode="verify"))
    assert report.ok, report.render()
    live = replay_cassette(reloaded, ReplayOptions(mode="live"))
    assert live.ok, live.render()
    # The write carried the AWS key: the cassette cannot, and the report says which step.
    needs = [n for n in live.notes if "needs" in n]
    assert len(needs) == 1 and "write" in needs[0] and "aws_access_key" in needs[0], live.notes
