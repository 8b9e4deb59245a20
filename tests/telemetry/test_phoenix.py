"""Live telemetry into a real OTLP receiver that users run locally: Arize Phoenix (optional).

Phoenix is not a dependency (it pulls in a server stack); the test runs when ``CODER_ES_PHOENIX``
names one, and is skipped with the reason otherwise (CI does not install it):

- ``CODER_ES_PHOENIX=/path/to/phoenix``: the ``phoenix`` executable of a separate environment
  (``python -m venv /tmp/phoenix-venv && /tmp/phoenix-venv/bin/pip install arize-phoenix``). The
  test starts ``phoenix serve`` on free loopback ports with a temporary working directory and its
  own telemetry and external resources off, and stops it afterwards;
- ``CODER_ES_PHOENIX=http://127.0.0.1:6006``: a Phoenix already running there. The test writes
  into projects of its own (``coder-es-test-<random>``), which it leaves behind.

A real ``coder-es run`` process (scripted provider, a real shell command, one call allowed and one
denied by rule) exports to it through the standard variables (the project named by a resource
attribute), and a second ``run`` continues the session; Phoenix's REST API must then hold the file
export's span tree: the same ids, parents and names, the GenAI attributes and usage (Phoenix shows
the chat spans as LLM spans), the permission decisions as span events, and no conversation text.
Then a session recorded without telemetry is sent with ``export --format otel --push`` (the
project named by a header, ``OTEL_EXPORTER_OTLP_HEADERS``) and must arrive the same way.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("opentelemetry.sdk", reason="the telemetry extra is not installed")

from coder_es.audit.span_tree import trace_id
from tests.cli.cli_helpers import run_process, script, text, tool, turn

PHOENIX = os.environ.get("CODER_ES_PHOENIX", "")
pytestmark = [
    pytest.mark.phoenix,
    pytest.mark.skipif(
        not PHOENIX,
        reason="Arize Phoenix not available: set CODER_ES_PHOENIX to its `phoenix` executable "
        "(pip install arize-phoenix in a separate venv) or to the URL of a running Phoenix",
    ),
    pytest.mark.timeout(600),
]
PROMPT = "please say hello-7f3a"
START_TIMEOUT_S = 240.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ready(url: str) -> bool:
    try:
        return httpx.get(url + "/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of a Phoenix that accepts OTLP/HTTP at ``/v1/traces``."""
    if PHOENIX.startswith(("http://", "https://")):
        url = PHOENIX.rstrip("/")
        if not _ready(url):
            pytest.fail(f"CODER_ES_PHOENIX={PHOENIX}: no Phoenix answers at {url}/healthz")
        yield url
        return
    if not os.access(PHOENIX, os.X_OK):
        pytest.fail(f"CODER_ES_PHOENIX={PHOENIX} is neither a URL nor an executable")
    work = tmp_path_factory.mktemp("phoenix")
    port = _free_port()
    env = {
        **os.environ,
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(_free_port()),
        "PHOENIX_WORKING_DIR": str(work),
        "PHOENIX_TELEMETRY_ENABLED": "false",
        "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
    }
    log = (work / "phoenix.log").open("w")
    process = subprocess.Popen(
        [PHOENIX, "serve"], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=work
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _ready(url):
            if process.poll() is not None or time.monotonic() > deadline:
                log.flush()
                tail = (work / "phoenix.log").read_text()[-2000:]
                pytest.fail(f"phoenix serve did not start at {url}:\n{tail}")
            time.sleep(1)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def phoenix_spans(url: str, project: str, expected: int) -> list[dict[str, Any]]:
    """The project's spans, once Phoenix has stored ``expected`` of them (it inserts them in the
    background after answering the export)."""
    spans: list[dict[str, Any]] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        reply = httpx.get(f"{url}/v1/projects/{project}/spans", params={"limit": 1000}, timeout=10)
        if reply.status_code == 200:
            spans = reply.json()["data"]
            if len(spans) >= expected:
                return spans
        time.sleep(0.5)
    raise AssertionError(f"Phoenix project {project} holds {len(spans)} of {expected} span(s)")


def shape(spans: list[tuple[str, str, str | None]]) -> list[tuple[str, str, str | None]]:
    return sorted(spans, key=lambda s: s[1])


def test_a_session_runs_into_phoenix_as_the_file_exports_tree(phoenix: str, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    turns = script(
        tmp_path / "script.json",
        turn(
            text("Let me look."),
            tool("bash", command="echo hello"),
            tool("bash", command="rm -rf build"),
            usage={"input_tokens": 120, "output_tokens": 30},
        ),
        turn(text("Done."), usage={"input_tokens": 200, "output_tokens": 10}),
    )
    live_project = f"coder-es-test-{uuid.uuid4().hex[:10]}"
    otel = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": phoenix,
        "OTEL_SERVICE_NAME": "coder-es-phoenix-test",
        # Phoenix files spans under the project this resource attribute names.
        "OTEL_RESOURCE_ATTRIBUTES": f"openinference.project.name={live_project}",
    }
    rules = ["--allow", "bash:echo*", "--deny", "bash:rm*"]
    first = run_process(["run", PROMPT, "--script", turns, "--json", *rules], workspace, **otel)
    assert first.code == 0, first.err
    sid = json.loads(first.out.splitlines()[0])["session_id"]
    # The same script again: the second turn's tool calls reuse the first's tool_use ids.
    second = run_process(
        ["run", "and once more", "--session", sid, "--script", turns, "--json", *rules],
        workspace,
        **otel,
    )
    assert second.code == 0, second.err
    # Phoenix does not take OTLP metrics: that is not a reason to complain about spans.
    assert "did not accept spans" not in first.err + second.err

    exported = run_process(["export", sid, "--format", "otel"], workspace)
    assert exported.code == 0, exported.err
    file_spans = json.loads(exported.out)["resourceSpans"][0]["scopeSpans"][0]["spans"]
    file_shape = shape(
        [(s["name"], s["spanId"], s.get("parentSpanId") or None) for s in file_spans]
    )

    spans = phoenix_spans(phoenix, live_project, len(file_spans))
    live_shape = shape([(s["name"], s["context"]["span_id"], s["parent_id"]) for s in spans])
    assert live_shape == file_shape
    assert {s["context"]["trace_id"] for s in spans} == {trace_id(sid)}

    turns_ = [s for s in spans if s["name"].startswith("invoke_agent ")]
    chats = [s for s in spans if s["name"].startswith("chat ")]
    tools = [s for s in spans if s["name"] == "execute_tool bash"]
    assert len(turns_) == 2 and len(chats) == 4 and len(tools) == 4
    assert all(s["parent_id"] is None for s in turns_)
    turn_ids = {s["context"]["span_id"] for s in turns_}
    assert all(s["parent_id"] in turn_ids for s in chats + tools)
    # Phoenix recognised the GenAI conventions: what its UI shows as LLM, tool and agent spans.
    assert {s["span_kind"] for s in chats} == {"LLM"}
    assert {s["span_kind"] for s in tools} == {"TOOL"}
    usage = sorted(
        (
            s["attributes"]["gen_ai.usage.input_tokens"],
            s["attributes"]["gen_ai.usage.output_tokens"],
        )
        for s in chats
    )
    assert usage == [(120, 30), (120, 30), (200, 10), (200, 10)]
    assert all(s["attributes"]["gen_ai.conversation.id"] == sid for s in spans)
    assert {s["attributes"]["gen_ai.system"] for s in chats} == {"scripted"}

    decisions = sorted(
        (
            e["attributes"].get("coder_es.permission.subject"),
            e["attributes"]["coder_es.permission.decision"],
        )
        for s in tools
        for e in s["events"]
        if e["name"] == "coder_es.permission.decided"
    )
    # The command lines are content: not sent without the opt-in (issue 29).
    assert decisions == [(None, "allow")] * 2 + [(None, "deny")] * 2
    assert sum(bool(s["attributes"].get("coder_es.permission.denied")) for s in tools) == 2
    # No conversation text without OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true.
    assert PROMPT not in json.dumps(spans)

    # A session recorded without telemetry, pushed when finished, into a project named by a
    # header this time (Phoenix keeps a span id once: the live session cannot be pushed again).
    quiet = run_process(["run", "another", "--script", turns, "--json", *rules], workspace)
    assert quiet.code == 0, quiet.err
    other = json.loads(quiet.out.splitlines()[0])["session_id"]
    exported = run_process(["export", other, "--format", "otel"], workspace)
    other_spans = json.loads(exported.out)["resourceSpans"][0]["scopeSpans"][0]["spans"]
    pushed_project = f"coder-es-push-{uuid.uuid4().hex[:10]}"
    push = run_process(
        ["export", other, "--format", "otel", "--push"],
        workspace,
        OTEL_EXPORTER_OTLP_ENDPOINT=phoenix,
        OTEL_EXPORTER_OTLP_HEADERS=f"x-project-name={pushed_project}",
    )
    assert push.code == 0, push.err
    assert f"pushed {len(other_spans)} of {len(other_spans)} span(s)" in push.out
    pushed = phoenix_spans(phoenix, pushed_project, len(other_spans))
    assert shape([(s["name"], s["context"]["span_id"], s["parent_id"]) for s in pushed]) == shape(
        [(s["name"], s["spanId"], s.get("parentSpanId") or None) for s in other_spans]
    )
    assert {s["context"]["trace_id"] for s in pushed} == {trace_id(other)}
