"""One whole agent session on every backend: events, blobs and a tracked projection.

The same test runs on popo, SQLite, LMDB and PostgreSQL (the ``store_config`` fixture); on
PostgreSQL it shows blobs in their table and tree checkpoints in the view table behave as on the
embedded backends.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from fleet_helpers import workspace, write_script

from coder_es.application import CoderApp
from coder_es.fleet.audit import audit_sessions
from coder_es.fleet.script import fleet_provider_factory
from coder_es.records import event_kind
from coder_es.service.api import AgentService, SessionOptions, auto_answerer
from coder_es.store.config import StoreConfig
from projections.tree import open_tree, track_tree


async def _session(app: CoderApp, ws: Path, script: Path) -> str:
    service = AgentService(app, ws, provider_factory=fleet_provider_factory())
    handle = await service.create_session(SessionOptions(provider="scripted", model=str(script)))
    try:
        async for _update in handle.send("go", answerer=auto_answerer(True)):
            pass
    finally:
        await handle.close()
    assert handle.outcome is not None and handle.outcome.reason == "end_turn"
    return handle.id


def test_a_session_runs_the_same_on_every_backend(
    store_config: StoreConfig, tmp_path: Path
) -> None:
    script = write_script(tmp_path / "s.json", 2)
    ws = workspace(tmp_path, "w")
    app = CoderApp(store_config)
    try:
        sid = asyncio.run(_session(app, ws, script))
        kinds = [event_kind(e) for e in app.session_events(app.resolve_session(sid))]
        assert kinds.count("ToolCallCompleted") == 2 and kinds[-1] == "ModelResponded"
        assert (ws / "trail.txt").read_text() == "step-0\nstep-1\n"
        assert audit_sessions(app) == []

        # Content-addressed blobs: the same bytes are stored once, under the same digest.
        payload = os.urandom(4096)
        digest = app.blobs.put(payload)
        assert app.blobs.put(payload) == digest and app.blobs.get(digest) == payload

        tracked = track_tree(app, app.resolve_session(sid))
        tree = tracked.open()
        tracked.save()
        record = app.views.get(tracked.key)
        assert record is not None and record.position == len(kinds)
        nodes = tree.nodes()
    finally:
        app.close()
    if store_config.backend == "popo":
        return  # memory: nothing survives the process
    reopened = CoderApp(store_config)
    try:
        assert open_tree(reopened, reopened.resolve_session(sid)).nodes() == nodes
        assert reopened.blobs.get(digest) == payload
    finally:
        reopened.close()
