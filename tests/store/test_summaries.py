"""Session summaries read from the event log alone (issue 35: start-up of read commands).

``coder-es sessions`` lists sessions through ``coder_es.summaries.read_summaries``, which opens
the recorder without the application or the domain model; it must give exactly what the
application gives, for every backend that takes that path.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from eventsourcing.utils import get_topic

from coder_es.application import CoderApp
from coder_es.domain.session import Session
from coder_es.store.config import StoreConfig
from coder_es.summaries import (
    ARCHIVED_TOPIC,
    SETTINGS_CHANGED_TOPIC,
    STARTED_TOPIC,
    UNARCHIVED_TOPIC,
    read_summaries,
)

ROOT = Path(__file__).resolve().parents[2]


def test_the_written_out_topics_are_those_of_the_domain_events() -> None:
    assert get_topic(Session.Started) == STARTED_TOPIC
    assert get_topic(Session.SettingsChanged) == SETTINGS_CHANGED_TOPIC
    assert get_topic(Session.Archived) == ARCHIVED_TOPIC
    assert get_topic(Session.Unarchived) == UNARCHIVED_TOPIC
    assert CoderApp.name == "coder_es"


def _record(config: StoreConfig) -> None:
    app = CoderApp(config)
    try:
        first = app.start_session(workspace="/w", model="m1", title="first")
        second = app.start_session(
            workspace="/w", model="m1", title="fork", parent_session=str(first.id), parent_node="1"
        )
        third = app.start_session(workspace="/x", title="archived, then back")
        app.update(
            second.id,
            lambda s: s.change_settings(agent="plan", provider="p2", model="m2", context_budget=9),
        )
        app.archive_session(first.id, by="user")
        app.archive_session(third.id, by="user")
        app.archive_session(third.id, by="user", archived=False)
    finally:
        app.close()


@pytest.mark.parametrize("backend", ["lmdb", "sqlite"])
def test_read_summaries_is_what_the_application_lists(tmp_path: Path, backend: str) -> None:
    config = StoreConfig(backend=backend, path=tmp_path / ".coder-es")
    _record(config)
    light = read_summaries(config)
    app = CoderApp(config)
    try:
        full = app.list_sessions(archived=None)
    finally:
        app.close()
    assert light == full
    assert [(s.title, s.agent, s.model, s.archived) for s in light] == [
        ("first", "build", "m1", True),
        ("fork", "plan", "m2", False),
        ("archived, then back", "build", "", False),
    ]
    assert light[1].parent_session == str(light[0].id) and light[1].parent_node == "1"


def test_sessions_lists_without_building_the_application(tmp_path: Path) -> None:
    """The command imports neither the domain model nor eventsourcing's Application."""
    _record(StoreConfig(backend="lmdb", path=tmp_path / ".coder-es"))
    probe = (
        "import sys\n"
        "from coder_es.cli.main import main\n"
        "code = main(['sessions', '--deleted'])\n"
        "loaded = [m for m in ('coder_es.domain.session', 'eventsourcing.application',"
        " 'coder_es.application') if m in sys.modules]\n"
        "print('LOADED', loaded)\n"
        "sys.exit(code)\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "first" in done.stdout and "fork" not in done.stdout
    assert "LOADED []" in done.stdout
