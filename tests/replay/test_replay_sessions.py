"""The bundled cassettes replay identically with the current code, in both modes."""

from __future__ import annotations

import pytest
from replay_helpers import NAMES, SESSIONS, bundled

from coder_es.application import CoderApp
from coder_es.audit.verify import verify_session
from coder_es.records import event_kind
from coder_es.store.config import StoreConfig
from replay.engine import ReplayOptions, replay_cassette
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


@pytest.mark.replay_cassette("coder_es/data/sessions/branched-rewind.cassette.jsonl", mode="live")
def test_the_marker_replays_a_branched_session(replay_report) -> None:  # type: ignore[no-untyped-def]
    # Two restorations (the rewind and the checkout) were replayed through the branching code.
    assert replay_report.ok and replay_report.mode == "live"
    assert replay_report.replayed_events == len(bundled("branched-rewind").events)


def test_a_live_replay_reproduces_the_users_mid_session_edit() -> None:
    import shutil
    from pathlib import Path

    cassette = bundled("user-edit-merged")
    merged = next(e for e in cassette.events if e.kind == "EditApplied")
    assert merged.fields["outcome"] == "merged"
    report = replay_cassette(cassette, ReplayOptions(mode="live", keep_workspace=True))
    assert report.ok and report.workspace is not None
    final = (Path(report.workspace) / "todo.py").read_text()
    shutil.rmtree(report.workspace)
    # Both the agent's change and the user's new function are on disk after the replay.
    assert "if 0 <= index < len(TODOS):" in final and "def clear():" in final


# These two run the project's tests in live mode (seconds each); what they save is the same in
# verify mode, and their live tool runs are covered in memory above.
_VERIFY_ONLY = {"fix-failing-test", "refactor-across-files"}


@pytest.mark.parametrize("name", NAMES)
def test_bundled_session_replays_into_every_persistent_backend(
    persistent_store_config: StoreConfig, name: str
) -> None:
    """Replay writes the session into a real store (in-memory is covered above): the saved
    events, blobs and snapshots must read back as the recording and verify."""
    cassette = bundled(name)
    mode = "verify" if name in _VERIFY_ONLY else "live"
    report = replay_cassette(cassette, ReplayOptions(mode=mode), store=persistent_store_config)
    assert report.ok, report.render()
    assert report.replayed_events == len(cassette.events)
    reopened = CoderApp(persistent_store_config)
    try:
        sid = reopened.get_session(report.session).id
        assert [event_kind(e) for e in reopened.session_events(sid)] == [
            e.kind for e in cassette.events
        ]
        assert verify_session(reopened, str(sid)).ok
    finally:
        reopened.close()
