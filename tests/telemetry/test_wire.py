"""Telemetry on the wire: a real OTLP/HTTP receiver on loopback decodes what arrives with
opentelemetry-proto; a collector that is not there neither slows nor fails a turn."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the telemetry extra is not installed")
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from coder_es.application import CoderApp
from coder_es.audit.span_tree import trace_id
from coder_es.cli.main import main
from coder_es.store.config import StoreConfig
from coder_es.telemetry.live import LiveTelemetry
from coder_es.telemetry.otlp_http import ProtobufSpanExporter
from coder_es.telemetry.settings import TelemetrySettings
from tests.audit.conftest import record_demo


class Receiver:
    def __init__(self) -> None:
        self.traces: list[Any] = []
        self.metrics: list[Any] = []
        self.paths: list[str] = []
        self.headers: list[dict[str, str]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.paths.append(self.path)
                receiver.headers.append(dict(self.headers))
                if self.path == "/v1/traces":
                    request: Any = trace_service_pb2.ExportTraceServiceRequest()
                    request.ParseFromString(body)
                    receiver.traces.append(request)
                    reply: Any = trace_service_pb2.ExportTraceServiceResponse()
                elif self.path == "/v1/metrics":
                    request = metrics_service_pb2.ExportMetricsServiceRequest()
                    request.ParseFromString(body)
                    receiver.metrics.append(request)
                    reply = metrics_service_pb2.ExportMetricsServiceResponse()
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                data = reply.SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def spans(self) -> list[Any]:
        return [
            span
            for request in self.traces
            for rs in request.resource_spans
            for ss in rs.scope_spans
            for span in ss.spans
        ]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_live_spans_and_metrics_arrive_over_otlp_http(receiver: Receiver, tmp_path: Path) -> None:
    settings = TelemetrySettings.resolve(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
            "OTEL_EXPORTER_OTLP_HEADERS": "x-team=agents,authorization=Bearer%20abc",
            "OTEL_SERVICE_NAME": "my-agent",
            "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=test",
        }
    )
    assert settings is not None
    lines: list[str] = []
    telemetry = LiveTelemetry(settings, report=lines.append)
    app = CoderApp(StoreConfig(backend="sqlite", path=tmp_path / "store"))
    try:
        telemetry.attach(app)
        sid = record_demo(app)
        telemetry.close()
    finally:
        app.close()
    assert lines == []
    # The spans went out in our encoding (the SDK's transport), not through its slower encoder.
    exporter = telemetry.exporter.inner
    assert isinstance(exporter, ProtobufSpanExporter) and exporter.encoded_batches >= 1
    spans = receiver.spans()
    names = sorted(s.name for s in spans)
    assert sum(n.startswith("invoke_agent ") for n in names) == 2
    assert "chat claude-x" in names and "execute_tool bash" in names
    chat = next(s for s in spans if s.name == "chat claude-x")
    attrs = {a.key: a.value for a in chat.attributes}
    assert attrs["gen_ai.usage.input_tokens"].int_value == 120
    assert attrs["gen_ai.conversation.id"].string_value == str(sid)
    resource = {
        a.key: a.value.string_value
        for a in receiver.traces[0].resource_spans[0].resource.attributes
    }
    assert resource["service.name"] == "my-agent"
    assert resource["deployment.environment"] == "test"
    assert any(h.get("authorization") == "Bearer abc" for h in receiver.headers)
    metric_names = {
        m.name
        for request in receiver.metrics
        for rm in request.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    }
    assert {"gen_ai.client.token.usage", "gen_ai.client.operation.duration"} <= metric_names


@pytest.fixture
def recorded_workspace(tmp_path: Path) -> tuple[Path, str]:
    """A workspace whose store (where the CLI looks) holds the audit fixture session."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    app = CoderApp(StoreConfig(backend="sqlite", path=workspace / ".coder-es"))
    try:
        return workspace, str(record_demo(app))
    finally:
        app.close()


def test_export_push_sends_a_finished_session(
    receiver: Receiver,
    recorded_workspace: tuple[Path, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: Any,
) -> None:
    workspace, sid = recorded_workspace
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.url + "/v1/traces")
    code = main(
        ["--workspace", str(workspace), "--backend", "sqlite", "export", str(sid)[:8],
         "--format", "otel", "--push"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    spans = receiver.spans()
    assert f"pushed {len(spans)} of {len(spans)} span(s)" in out
    assert sum(s.name.startswith("invoke_agent ") for s in spans) == 2
    assert {s.trace_id.hex() for s in spans} == {trace_id(sid)}


def test_push_without_an_endpoint_is_a_usage_error(
    recorded_workspace: tuple[Path, str], monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    workspace, sid = recorded_workspace
    code = main(
        ["--workspace", str(workspace), "--backend", "sqlite", "export", str(sid),
         "--format", "otel", "--push"]
    )  # fmt: skip
    assert code == 2
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" in capsys.readouterr().err


def test_an_unreachable_collector_neither_slows_nor_fails_a_turn(tmp_path: Path) -> None:
    closed = f"http://127.0.0.1:{free_port()}"

    def record(with_telemetry: bool) -> tuple[float, list[str], LiveTelemetry | None]:
        app = CoderApp(StoreConfig(backend="sqlite", path=tmp_path / f"store-{with_telemetry}"))
        lines: list[str] = []
        telemetry = None
        if with_telemetry:
            settings = TelemetrySettings.resolve({"OTEL_EXPORTER_OTLP_ENDPOINT": closed})
            assert settings is not None
            telemetry = LiveTelemetry(settings, report=lines.append, schedule_delay_millis=10)
            telemetry.attach(app)
        try:
            t0 = time.perf_counter()
            for _ in range(3):
                record_demo(app)
                time.sleep(0.05)  # let the export thread try (and fail) between sessions
            spent = time.perf_counter() - t0
            if telemetry is not None:
                t0 = time.perf_counter()
                telemetry.close()
                assert time.perf_counter() - t0 < 3.0  # exit does not wait out the back-off
        finally:
            app.close()
        return spent, lines, telemetry

    baseline, _, _ = record(False)
    spent, lines, telemetry = record(True)
    assert telemetry is not None
    # Recording is not held up by the collector (the sleeps are in both runs).
    assert spent < baseline + 1.0
    unreachable = [line for line in lines if "did not accept spans" in line]
    assert len(unreachable) == 1, lines
    lost = [line for line in lines if "were not exported" in line]
    assert len(lost) == 1 and f"of {telemetry.submitted} span(s)" in lost[0]
    assert telemetry.exporter.exported == 0 and telemetry.submitted > 0


def test_serve_sends_a_turns_span_when_the_turn_ends(receiver: Receiver, tmp_path: Path) -> None:
    """A long-running ``serve`` does not hold a finished turn's span until its next message or
    its exit: the span arrives while the server still runs."""
    import asyncio
    import json

    import websockets

    from tests.clients.client_helpers import make_workspace, run, serve_process

    workspace = make_workspace(
        tmp_path,
        '[permissions.rules]\nbash = "allow"\n',
        [
            {"blocks": [{"type": "tool_use", "name": "bash", "input": {"command": "echo hi"}}]},
            {"blocks": [{"type": "text", "text": "done"}], "usage": {"output_tokens": 3}},
        ],
    )

    async def scenario() -> tuple[str, list[str]]:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}
        async with (
            serve_process(workspace, tmp_path, extra_env=env) as (url, proc),
            websockets.connect(url) as ws,
        ):
            hello = json.loads(await ws.recv())
            await ws.send(json.dumps({"type": "send_message", "text": "say hi"}))
            while json.loads(await asyncio.wait_for(ws.recv(), 20))["type"] != "finished":
                pass
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                names = [s.name for s in receiver.spans()]
                if any(n.startswith("invoke_agent ") for n in names):
                    break
                await asyncio.sleep(0.1)
            assert proc.returncode is None  # the server is still running
            return str(hello["session_id"]), names

    sid, names = run(scenario())
    assert sorted(names) == [
        "chat script",
        "chat script",
        "execute_tool bash",
        "invoke_agent build",
    ]
    assert {s.trace_id.hex() for s in receiver.spans()} == {trace_id(sid)}
