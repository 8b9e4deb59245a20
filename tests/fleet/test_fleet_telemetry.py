"""A fleet worker sends each job's spans to the configured OTLP collector when the job ends."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("procrastinate", reason="the fleet queue needs procrastinate (postgres extra)")
pytest.importorskip("opentelemetry.sdk", reason="the telemetry extra is not installed")

from backends import make_config, requires_postgres
from fleet_helpers import create_sessions, enqueue, run, workspace, write_script

from coder_es.fleet.worker import FleetWorker, WorkerOptions
from tests.telemetry.test_wire import Receiver

pytestmark = requires_postgres


def test_a_worker_exports_each_sessions_spans(
    tmp_path: Path, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    receiver = Receiver()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    config = make_config("postgres", tmp_path, pg_schema)
    script = write_script(tmp_path / "s.json", 2, delay_ms=5)
    jobs = run(create_sessions(config, [workspace(tmp_path, f"w{i}") for i in range(2)], script))
    run(enqueue(config, jobs))
    worker = FleetWorker(config, WorkerOptions(install_signal_handlers=False, until_empty=True))
    try:
        run(worker.run())
        assert worker.telemetry is not None
        # Each job's turn was finished when the job ended, before the worker stops.
        assert worker.telemetry.submitted > 0
        assert worker.telemetry.open_sessions == ()
    finally:
        worker.close()
        receiver.close()
    spans = receiver.spans()
    turns = [s for s in spans if s.name.startswith("invoke_agent ")]
    assert len(turns) == 2
    conversations = {
        a.value.string_value
        for s in turns
        for a in s.attributes
        if a.key == "gen_ai.conversation.id"
    }
    assert conversations == {j.session_id for j in jobs}
    assert any(s.name.startswith("chat ") for s in spans)
