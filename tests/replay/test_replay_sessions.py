"""The bundled cassettes replay identically with the current code, in both modes."""

from __future__ import annotations

import pytest
from replay_helpers import NAMES, SESSIONS, bundled

from replay.pytest_plugin import CassetteReplayer


@pytest.mark.parametrize("mode", ["verify", "live"])
@pytest.mark.parametrize("name", NAMES)
def test_bundled_session_replays_identically(
    replay: CassetteReplayer, name: str, mode: str
) -> None:
    report = replay(SESSIONS / f"{name}.cassette.jsonl", mode=mode)
    cassette = bundled(name)
    assert report.ok and report.replayed_events == len(cassette.events)
    assert report.model_calls == cassette.count("ModelResponded")


@pytest.mark.replay_cassette("fixtures/sessions/branched-rewind.cassette.jsonl", mode="live")
def test_the_marker_replays_a_branched_session(replay_report) -> None:  # type: ignore[no-untyped-def]
    # Two restorations (the rewind and the checkout) were replayed through the branching code.
    assert replay_report.ok and replay_report.mode == "live"
    assert replay_report.replayed_events == len(bundled("branched-rewind").events)


def test_a_live_replay_reproduces_the_users_mid_session_edit() -> None:
    import shutil
    from pathlib import Path

    from replay.engine import ReplayOptions, replay_cassette

    cassette = bundled("user-edit-merged")
    merged = next(e for e in cassette.events if e.kind == "EditApplied")
    assert merged.fields["outcome"] == "merged"
    report = replay_cassette(cassette, ReplayOptions(mode="live", keep_workspace=True))
    assert report.ok and report.workspace is not None
    final = (Path(report.workspace) / "todo.py").read_text()
    shutil.rmtree(report.workspace)
    # Both the agent's change and the user's new function are on disk after the replay.
    assert "if 0 <= index < len(TODOS):" in final and "def clear():" in final
