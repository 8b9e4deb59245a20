"""The sessions summary projection: follows the log, resumes after a restart, counts once."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from backends import make_config, requires_postgres
from eventsourcing.persistence import Tracking

from coder_es.application import CoderApp
from coder_es.fleet.projection import (
    caught_up,
    compare_with_rebuild,
    open_summary_view,
    run_summary_projection,
)
from coder_es.fleet.summary import all_events
from coder_es.store.config import StoreConfig

pytestmark = requires_postgres


def _sessions(app: CoderApp, n: int, tag: str) -> list[str]:
    ids = []
    for i in range(n):
        s = app.start_session(workspace=f"/ws/{tag}{i}", title=f"{tag}{i}")
        s.add_user_message("hello")
        s.record_model_response(
            blocks=[{"type": "text", "text": "hi"}],
            stop_reason="end_turn",
            usage={},
            provider="scripted",
            model="m",
        )
        app.save(s)
        ids.append(str(s.id))
    return ids


def _catch_up(config: StoreConfig) -> int:
    return run_summary_projection(config, stop=threading.Event(), until=caught_up)


def test_a_restarted_projection_resumes_where_it_stopped(tmp_path: Path, pg_schema: str) -> None:
    config = make_config("postgres", tmp_path, pg_schema)
    app = CoderApp(config)
    view = open_summary_view(config)
    try:
        first = _sessions(app, 3, "a")
        assert _catch_up(config) == 9
        assert compare_with_rebuild(app, view) == []
        assert {r.status for r in view.rows().values()} == {"complete"}

        # More events while no projection runs; the next process starts after position 9.
        app.update(first[0], lambda s: s.add_user_message("again"))
        _sessions(app, 2, "b")
        assert _catch_up(config) == 16
        assert compare_with_rebuild(app, view) == []
        rows = view.rows()
        assert len(rows) == 5
        assert rows[first[0]].events == 4 and rows[first[0]].status == "running"
        assert rows[first[0]].user_messages == 2
    finally:
        app.close()


def test_an_event_already_tracked_is_not_counted_twice(tmp_path: Path, pg_schema: str) -> None:
    config = make_config("postgres", tmp_path, pg_schema)
    app = CoderApp(config)
    view = open_summary_view(config)
    try:
        [sid] = _sessions(app, 1, "a")
        _catch_up(config)
        before = view.rows()[sid]
        # A second projection process replaying event 2 (started by mistake) changes nothing.
        event = list(all_events(app))[1]
        assert view.apply(event, Tracking(CoderApp.name, 2)) is False
        assert view.rows()[sid] == before
        assert view.position() == 3
    finally:
        app.close()


def test_a_running_projection_follows_new_events_live(tmp_path: Path, pg_schema: str) -> None:
    config = make_config("postgres", tmp_path, pg_schema)
    app = CoderApp(config)
    view = open_summary_view(config)
    stop = threading.Event()
    failures: list[BaseException] = []

    def follow() -> None:
        try:
            run_summary_projection(config, stop=stop)
        except BaseException as e:  # surfaced below
            failures.append(e)

    thread = threading.Thread(target=follow)
    thread.start()
    try:
        ids = _sessions(app, 2, "live")
        deadline = time.monotonic() + 20
        while view.position() < 6 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert view.position() == 6
        assert set(view.rows()) == set(ids)
    finally:
        stop.set()
        thread.join(timeout=20)
        app.close()
    assert not failures
    assert not thread.is_alive()
