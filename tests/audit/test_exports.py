"""The four export formats: stable bytes, OTLP that parses, readable transcripts, filters."""

from __future__ import annotations

import json

import pytest

from coder_es.application import CoderApp
from coder_es.audit.export import ExportOptions, export_session
from coder_es.audit.filters import ExportFilter
from coder_es.audit.records import load_session_events
from coder_es.store.config import StoreConfig
from tests.audit.conftest import Recorded


@pytest.mark.parametrize("fmt", ["jsonl", "otel", "md", "html"])
def test_exports_are_stable_byte_for_byte(
    recorded: Recorded, sqlite_config: StoreConfig, fmt: str
) -> None:
    first = export_session(recorded.app, recorded.session, ExportOptions(format=fmt))
    reopened = CoderApp(sqlite_config)
    try:
        again = export_session(reopened, recorded.session, ExportOptions(format=fmt))
    finally:
        reopened.close()
    assert first == again


def test_otel_export_is_an_otlp_trace_request_with_genai_conventions(recorded: Recorded) -> None:
    json_format = pytest.importorskip("google.protobuf.json_format")
    trace_service = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")
    data = export_session(recorded.app, recorded.session, ExportOptions(format="otel"))
    assert data.count(b"\n") == 1  # one request per line, as the collector's file receiver reads
    request = json_format.Parse(data, trace_service.ExportTraceServiceRequest())
    spans = list(request.resource_spans[0].scope_spans[0].spans)
    raw_spans = json.loads(data)["resourceSpans"][0]["scopeSpans"][0]["spans"]
    assert all(len(s["traceId"]) == 32 and len(s["spanId"]) == 16 for s in raw_spans)
    attrs = [{a.key: a.value for a in s.attributes} for s in spans]
    ops = [a["gen_ai.operation.name"].string_value for a in attrs]
    assert ops.count("invoke_agent") == 2  # two user turns
    assert ops.count("chat") == 5 and ops.count("execute_tool") == 4
    chat = next(a for a in attrs if a["gen_ai.operation.name"].string_value == "chat")
    assert chat["gen_ai.usage.input_tokens"].int_value == 120
    assert chat["gen_ai.usage.output_tokens"].int_value == 30
    assert chat["gen_ai.provider.name"].string_value == "anthropic"
    assert chat["gen_ai.request.model"].string_value == "claude-x"
    by_name = {s.name: s for s in spans}
    bash = by_name["execute_tool bash"]
    bash_attrs = {a.key: a.value for a in bash.attributes}
    assert bash_attrs["gen_ai.tool.call.id"].string_value == "t3"
    assert bash_attrs["gen_ai.tool.name"].string_value == "bash"
    decision = next(e for e in bash.events if e.name == "coder_es.permission.decided")
    assert {a.key: a.value.string_value for a in decision.attributes}[
        "coder_es.permission.decision"
    ] == "deny"
    turn_ids = {raw["spanId"] for raw in raw_spans if raw["name"].startswith("invoke_agent")}
    assert all(
        raw.get("parentSpanId") in turn_ids
        for raw in raw_spans
        if not raw["name"].startswith("invoke_agent")
    )
    assert all(s.start_time_unix_nano <= s.end_time_unix_nano for s in spans)


def test_markdown_shows_tree_permissions_and_diffs(recorded: Recorded) -> None:
    md = export_session(recorded.app, recorded.session, ExportOptions(format="md")).decode()
    assert "## Conversation tree" in md and "U 19 (parent 2)" in md
    assert "-    return a - b" in md and "+    return a + b" in md  # the write's diff
    assert "+# maths" in md  # the user's concurrent change, merged by the edit
    assert "permission DENIED: bash cat secrets/.env" in md
    assert "+API_KEY=not-really" in md


def test_html_is_one_self_contained_file(recorded: Recorded) -> None:
    html = export_session(recorded.app, recorded.session, ExportOptions(format="html")).decode()
    assert html.startswith("<!DOCTYPE html>") and '<svg xmlns="http://www.w3.org/2000/svg"' in html
    for needle in ("<script", 'src="http', 'href="http', "@import", "url("):
        assert needle not in html
    assert html.count("<circle") >= 11 and "+    return a + b" in html


def test_redact_glob_hides_file_contents_everywhere(recorded: Recorded) -> None:
    for fmt in ("jsonl", "otel", "md", "html"):
        data = export_session(
            recorded.app,
            recorded.session,
            ExportOptions(format=fmt, redact_globs=("secrets/*",)),
        ).decode()
        assert "not-really" not in data, fmt
    jsonl = export_session(
        recorded.app, recorded.session, ExportOptions(format="jsonl", redact_globs=("secrets/*",))
    ).decode()
    header = json.loads(jsonl.splitlines()[0])
    assert header["redactions"] == [
        {
            "kind": "glob",
            "pattern": "secrets/*",
            "replacement": "[REDACTED:glob:secrets/*]",
            "versions": [20, 21, 22],
        }
    ]
    assert "[REDACTED:glob:secrets/*]" in jsonl


def test_filters_by_kind_time_and_branch(recorded: Recorded) -> None:
    app, sid = recorded.app, recorded.session

    def versions(flt: ExportFilter) -> list[int]:
        data = export_session(app, sid, ExportOptions(format="jsonl", filter=flt))
        return [json.loads(line)["version"] for line in data.splitlines()[1:-1]]

    assert versions(ExportFilter(kinds=frozenset({"UserMessageAdded"}))) == [2, 19]
    events = load_session_events(app, sid)
    middle = events[10].time
    assert versions(ExportFilter(since=middle)) == list(range(11, 24))
    assert versions(ExportFilter(until=middle)) == list(range(1, 12))
    # The fork: node 19 hangs off node 2; its branch leaves out the first turn's work.
    branch = versions(ExportFilter(branch="20"))
    assert branch[:2] == [1, 2] and 3 not in branch and {19, 20, 21}.issubset(branch)
    assert versions(ExportFilter(branch="start")) == [1, 2, 18]  # 18: the head moved to 2
