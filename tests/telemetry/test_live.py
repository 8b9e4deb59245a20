"""Live telemetry through the OpenTelemetry SDK: the span tree of a recorded session as it is
saved, the GenAI metrics, content only when opted in (and then only the redacted form)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

pytest.importorskip("opentelemetry.sdk", reason="the telemetry extra is not installed")
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from coder_es.application import CoderApp
from coder_es.audit.export import ExportOptions, export_session
from coder_es.store.config import StoreConfig
from coder_es.telemetry.live import LiveTelemetry, _decode_json
from coder_es.telemetry.settings import TelemetrySettings
from tests.audit.conftest import SECRET_KEY, record_demo

ENDPOINT = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}


def live(env: dict[str, str]) -> tuple[LiveTelemetry, InMemorySpanExporter, InMemoryMetricReader]:
    settings = TelemetrySettings.resolve({**ENDPOINT, **env})
    assert settings is not None
    spans, metrics = InMemorySpanExporter(), InMemoryMetricReader()
    lines: list[str] = []
    telemetry = LiveTelemetry(
        settings, span_exporter=spans, metric_reader=metrics, report=lines.append
    )
    return telemetry, spans, metrics


@pytest.fixture
def app(tmp_path: Path) -> Iterator[CoderApp]:
    app = CoderApp(StoreConfig(backend="sqlite", path=tmp_path / "store"))
    yield app
    app.close()


def record_live(app: CoderApp, env: dict[str, str]) -> tuple[list[ReadableSpan], Any, str]:
    telemetry, exporter, metrics = live(env)
    telemetry.attach(app)
    sid = record_demo(app)
    telemetry.close()
    return list(exporter.get_finished_spans()), metrics, str(sid)


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def dump(spans: list[ReadableSpan]) -> str:
    """Every attribute and span event of the spans, as text."""
    return json.dumps(
        [[attrs(s), [(e.name, dict(e.attributes or {})) for e in s.events]] for s in spans],
        default=str,
    )


def nanos_of(span: ReadableSpan) -> tuple[int, int]:
    return (span.start_time or 0, span.end_time or 0)


def test_live_spans_are_the_file_exports_tree(app: CoderApp) -> None:
    spans, _, sid = record_live(app, {})
    exported = json.loads(export_session(app, sid, ExportOptions(format="otel")))
    file_spans = exported["resourceSpans"][0]["scopeSpans"][0]["spans"]

    live_shape = sorted(
        (
            s.name,
            f"{s.context.span_id:016x}",  # type: ignore[union-attr]
            f"{s.parent.span_id:016x}" if s.parent else "",
            [e.name for e in s.events],
            nanos_of(s),
        )
        for s in spans
    )
    file_shape = sorted(
        (
            s["name"],
            s["spanId"],
            s.get("parentSpanId", ""),
            [e["name"] for e in s["events"]],
            (int(s["startTimeUnixNano"]), int(s["endTimeUnixNano"])),
        )
        for s in file_spans
    )
    assert live_shape == file_shape
    assert {f"{s.context.trace_id:032x}" for s in spans} == {  # type: ignore[union-attr]
        file_spans[0]["traceId"]
    }
    # The turns are roots; every chat and tool span hangs off one of them.
    turns = {s.context.span_id for s in spans if s.name.startswith("invoke_agent")}  # type: ignore[union-attr]
    assert len(turns) == 2
    assert all(s.parent is not None and s.parent.span_id in turns for s in spans if s.parent)


def test_chat_spans_carry_genai_attributes_and_usage(app: CoderApp) -> None:
    spans, _, sid = record_live(app, {})
    chat = next(s for s in spans if s.name == "chat claude-x")
    a = attrs(chat)
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.system"] == "anthropic"  # the pinned v1.36.0 name by default
    assert "gen_ai.provider.name" not in a
    assert a["gen_ai.request.model"] == "claude-x"
    assert a["gen_ai.usage.input_tokens"] == 120 and a["gen_ai.usage.output_tokens"] == 30
    assert a["gen_ai.conversation.id"] == sid
    assert chat.kind.name == "CLIENT"
    # No content unless opted in: not on chat spans, not on the turn's events either.
    assert not any(k.endswith("messages") for k in a)
    assert all(not e.name.startswith("gen_ai.") for s in spans for e in s.events)
    assert "fix the add function" not in dump(spans)
    assert "Reading the file." not in dump(spans)


def test_latest_conventions_on_opt_in(app: CoderApp) -> None:
    spans, _, _ = record_live(
        app, {"OTEL_SEMCONV_STABILITY_OPT_IN": "http,gen_ai_latest_experimental"}
    )
    chat = attrs(next(s for s in spans if s.name == "chat claude-x"))
    assert chat["gen_ai.provider.name"] == "anthropic" and "gen_ai.system" not in chat


def test_permission_decisions_are_span_events(app: CoderApp) -> None:
    spans, _, _ = record_live(app, {})
    bash = next(s for s in spans if s.name == "execute_tool bash")
    assert attrs(bash)["gen_ai.tool.call.id"] == "t3"
    decided = next(e for e in bash.events if e.name == "coder_es.permission.decided")
    assert dict(decided.attributes or {})["coder_es.permission.decision"] == "deny"
    assert attrs(bash)["coder_es.permission.denied"] is True


def test_metrics_token_usage_and_duration(app: CoderApp) -> None:
    _, metrics, sid = record_live(app, {})
    data = metrics.get_metrics_data()
    assert data is not None
    found = {
        m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
    }
    usage = found["gen_ai.client.token.usage"]
    assert usage.unit == "{token}"
    by_type = {dict(p.attributes)["gen_ai.token.type"]: p for p in usage.data.data_points}
    chats = [
        s
        for s in json.loads(export_session(app, sid, ExportOptions(format="otel")))[
            "resourceSpans"
        ][0]["scopeSpans"][0]["spans"]
        if s["name"].startswith("chat ")
    ]
    recorded = sum(
        int(a["value"]["intValue"])
        for s in chats
        for a in s["attributes"]
        if a["key"] == "gen_ai.usage.input_tokens"
    )
    assert by_type["input"].sum == recorded > 0
    assert by_type["input"].count == 5  # five model responses in the session
    duration = found["gen_ai.client.operation.duration"]
    assert duration.unit == "s"
    assert sum(p.count for p in duration.data.data_points) == 5


def test_metrics_are_recorded_as_spans_are_sent_not_only_at_exit(app: CoderApp) -> None:
    # Measurements are queued by the loop and recorded on the batch thread before each batch
    # is sent: a long-running process's periodic metric exports must see them.
    telemetry, _, metrics = live({})
    telemetry.attach(app)
    try:
        record_demo(app)
        assert telemetry.processor.force_flush()
        data = metrics.get_metrics_data()
        assert data is not None
        counts = {
            m.name: sum(p.count for p in m.data.data_points)
            for rm in data.resource_metrics
            for sm in rm.scope_metrics
            for m in sm.metrics
        }
        # A chat span is finished at its response: all five of the session's were measured.
        assert counts["gen_ai.client.operation.duration"] == 5
        assert counts["gen_ai.client.token.usage"] == 10  # input and output, each
    finally:
        telemetry.close()


@pytest.mark.parametrize("latest", [False, True])
def test_content_only_when_opted_in_and_then_redacted(app: CoderApp, latest: bool) -> None:
    env = {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"}
    if latest:
        env["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
    spans, _, _ = record_live(app, env)
    everything = json.dumps(
        [[attrs(s), [(e.name, dict(e.attributes or {})) for e in s.events]] for s in spans],
        default=str,
    )
    assert "fix the add function" in everything  # the user's message is there
    assert SECRET_KEY not in everything  # the key planted in a tool output is not
    assert "[REDACTED" in everything  # its marker is
    if latest:
        chat = attrs(next(s for s in spans if s.name == "chat claude-x"))
        assert "fix the add function" in chat["gen_ai.input.messages"]
        assert "Reading the file." in chat["gen_ai.output.messages"]
    else:
        assert any(e.name == "gen_ai.choice" for s in spans for e in s.events)


def test_settings_from_variables_over_the_config_table() -> None:
    from coder_es.config.values import TelemetryConfig

    table = TelemetryConfig(endpoint="http://collector:4318/", service_name="team-agent")
    s = TelemetrySettings.resolve({}, table)
    assert s is not None
    assert s.traces_endpoint == "http://collector:4318/v1/traces"
    assert s.metrics_endpoint == "http://collector:4318/v1/metrics"
    assert s.resource["service.name"] == "team-agent"
    env = {
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://other:4318/v1/traces",
        "OTEL_SERVICE_NAME": "from-env",
    }
    s = TelemetrySettings.resolve(env, table)
    assert s is not None and s.traces_endpoint == "http://other:4318/v1/traces"
    assert s.resource["service.name"] == "from-env"
    assert TelemetrySettings.resolve({}, None) is None  # nothing configured: off
    assert TelemetrySettings.resolve({**ENDPOINT, "OTEL_SDK_DISABLED": "true"}) is None
    assert TelemetrySettings.resolve(ENDPOINT, TelemetryConfig(enabled=False)) is None


@pytest.mark.parametrize(
    ("protocol", "said"),
    [("http/json", "is not supported"), ("grpc", "opentelemetry-exporter-otlp-proto-grpc")],
)
def test_unusable_settings_leave_telemetry_off_with_a_message(
    app: CoderApp, capsys: pytest.CaptureFixture[str], protocol: str, said: str
) -> None:
    from coder_es.telemetry.attach import start_telemetry

    if protocol == "grpc":
        try:
            import opentelemetry.exporter.otlp.proto.grpc  # noqa: F401
        except ImportError:
            pass  # the usual install: gRPC is refused with what to install
        else:
            pytest.skip("the gRPC exporter is installed here: grpc is a usable protocol")
    env = {**ENDPOINT, "OTEL_EXPORTER_OTLP_PROTOCOL": protocol}
    assert start_telemetry(app, environ=env) is None
    err = capsys.readouterr().err
    assert "telemetry off" in err and said in err
    record_demo(app)  # the session runs regardless
    assert app.save_observers == []


def test_a_project_config_cannot_redirect_telemetry(tmp_path: Path) -> None:
    from coder_es.config import load_config

    workspace = tmp_path / "cloned"
    workspace.mkdir()
    (workspace / ".coder-es").mkdir()
    (workspace / ".coder-es" / "config.toml").write_text(
        '[telemetry]\nendpoint = "http://evil.example:4318"\n'
    )
    config = load_config(workspace)
    assert config.telemetry.endpoint is None
    assert any("telemetry" in line for line in config.ignored_lines())


def test_span_ids_stay_unique_when_a_provider_reuses_tool_call_ids(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The scripted provider (like some OpenAI-compatible servers) numbers tool calls afresh in
    each process: two turns of one session hold the same ``tool_use_id``. Their spans must not
    share an id (a collector keeps one of them: Phoenix showed half the tool calls)."""
    from tests.cli.cli_helpers import Cli, script, text, tool, turn

    workspace = tmp_path / "ws"
    workspace.mkdir()
    cli = Cli(workspace, capsys)
    path = script(tmp_path / "s.json", turn(tool("bash", command="echo hi")), turn(text("done")))
    first, sid = cli.run_script("one", path, "--allow", "bash:echo*")
    assert first.code == 0, first.err
    again = cli("run", "two", "--session", sid, "--script", path, "--allow", "bash:echo*")
    assert again.code == 0, again.err
    exported = cli("export", sid, "--format", "otel")
    spans = json.loads(exported.out)["resourceSpans"][0]["scopeSpans"][0]["spans"]
    tools = [s for s in spans if s["name"] == "execute_tool bash"]
    call_ids = {
        a["value"]["stringValue"]
        for s in tools
        for a in s["attributes"]
        if a["key"] == "gen_ai.tool.call.id"
    }
    assert len(tools) == 2 and len(call_ids) == 1  # the same call id, twice
    assert len({s["spanId"] for s in spans}) == len(spans)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()  # NaN and infinities included: json writes them, msgspec refuses them
    | st.text(),  # lone surrogates included: the same
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(json_values, st.booleans())
def test_stored_states_decode_to_what_json_gives(value: Any, ascii_only: bool) -> None:
    try:
        raw = json.dumps(value, ensure_ascii=ascii_only).encode()
    except UnicodeEncodeError:  # a lone surrogate written raw is not UTF-8: never stored
        assume(False)
    decoded = _decode_json(raw)
    # Compared as JSON again: NaN != NaN, but its text is the same.
    assert json.dumps(decoded) == json.dumps(json.loads(raw))


CONTENT_BITS = ("cat secrets/.env", "reads secrets", "calc.py", "secrets/key.txt")


def test_attributes_that_carry_content_need_the_opt_in(app: CoderApp) -> None:
    """Issue 29 item 7: ``coder_es.permission.subject`` carried the whole command line and
    ``coder_es.permission.reason`` the outside path, with no content opt-in; so did paths."""
    spans, _, sid = record_live(app, {})
    text = dump(spans)
    for bit in CONTENT_BITS:
        assert bit not in text, bit
    bash = next(s for s in spans if s.name == "execute_tool bash")
    decided = dict(
        next(e for e in bash.events if e.name == "coder_es.permission.decided").attributes or {}
    )
    assert (
        "coder_es.permission.subject" not in decided and "coder_es.permission.reason" not in decided
    )
    assert decided["coder_es.permission.decision"] == "deny"  # what happened stays visible
    # The file export follows the same opt-in (off: the ExportOptions default).
    exported = export_session(app, sid, ExportOptions(format="otel")).decode()
    for bit in CONTENT_BITS:
        assert bit not in exported, bit
    assert '"coder_es.permission.decision"' in exported


def test_with_the_opt_in_the_content_attributes_are_sent(app: CoderApp) -> None:
    spans, _, sid = record_live(app, {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"})
    text = dump(spans)
    for bit in CONTENT_BITS:
        assert bit in text, bit
    exported = export_session(app, sid, ExportOptions(format="otel", capture_content=True))
    assert all(bit.encode() in exported for bit in CONTENT_BITS)
