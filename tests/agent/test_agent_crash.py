"""A `coder-es run` killed mid-session resumes with nothing lost; in-flight tools are settled."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from agent_helpers import ON_EVERY_BACKEND, Harness, collect, text, tool, turn
from backends import cli_store_env
from processes import gone

from coder_es.agent.decider import INTERRUPTED_BY_CRASH
from coder_es.agent.request import expand_request
from coder_es.application import CoderApp
from coder_es.audit.verify import verify_session
from coder_es.records import event_kind
from coder_es.store.config import StoreConfig
from coder_es.userdirs import user_config_dir

REPO_ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str, cwd: Path, backend: str = "sqlite") -> list[str]:
    return [
        sys.executable,
        "-m",
        "coder_es.cli.main",
        "--workspace",
        str(cwd),
        "--backend",
        backend,
        *args,
    ]


def test_sigkill_during_a_slow_model_turn_then_resume(
    h: Harness, tmp_path: Path, persistent_store_config: StoreConfig
) -> None:
    """On each backend another process can reopen: the killed run's saved events must be
    durable there, and a new process must resume from them."""
    config = persistent_store_config
    h.app.close()
    backend = config.backend
    first = tmp_path / "first.json"
    first.write_text(
        json.dumps(
            {
                "turns": [
                    turn(tool("bash", command="echo one > one.txt")),
                    turn(text("never arrives"), delay_ms=60_000),
                ]
            }
        )
    )
    env = {
        **os.environ,
        **cli_store_env(config),
        "CODER_ES_STORE": str(config.path),
        "PYTHONPATH": str(REPO_ROOT),
    }
    proc = subprocess.Popen(
        cli("run", "make one.txt", "--script", str(first), "--json", cwd=h.root, backend=backend),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    session_id = json.loads(proc.stdout.readline())["session_id"]
    app = CoderApp(config)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            kinds = [event_kind(e) for e in app.session_events(app.get_session(session_id).id)]
            if "ToolCallCompleted" in kinds:
                break
            time.sleep(0.05)
        else:  # pragma: no cover
            raise AssertionError(f"the run never recorded its tool result: {proc.stderr}")
        time.sleep(0.3)  # well inside the 60 s model turn
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        saved = [event_kind(e) for e in app.session_events(app.get_session(session_id).id)]
        assert saved[-1] == "ToolCallCompleted" and (h.root / "one.txt").read_text() == "one\n"

        # The same file name: a script's name is its "model", and another model would be
        # recorded as a SettingsChanged before the turn.
        second = tmp_path / "again" / "first.json"
        second.parent.mkdir()
        second.write_text(json.dumps({"turns": [turn(text("Finished after the crash."))]}))
        resumed = subprocess.run(
            cli(
                "run",
                "--session",
                session_id[:8],
                "--script",
                str(second),
                "--json",
                cwd=h.root,
                backend=backend,
            ),
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert resumed.returncode == 0, resumed.stderr
        lines = [json.loads(line) for line in resumed.stdout.splitlines()]
        assert lines[0] == {
            **lines[0],
            "type": "session",
            "session_id": session_id,
            "resumed": True,
        }
        assert lines[-1]["type"] == "turn_ended" and lines[-1]["reason"] == "end_turn"

        sid = app.get_session(session_id).id
        events = app.session_events(sid)
        assert [event_kind(e) for e in events] == [*saved, "ModelResponded"]
        response = events[-1]
        assert response.parent == str(events[-2].originator_version)
        request = expand_request(app.blobs, response.request_digest)
        result_block = request["messages"][-1]["content"][0]
        assert result_block["type"] == "tool_result" and "[exit code 0]" in result_block["content"]
        assert verify_session(app, str(sid)).ok
    finally:
        if proc.poll() is None:  # pragma: no cover
            proc.kill()
        app.close()


@ON_EVERY_BACKEND
def test_resume_settles_tools_that_were_in_flight(h: Harness) -> None:
    """The process died while `bash` ran (maybe half-done: not re-run) before `read` started."""
    handle = h.start([])
    session = h.app.get_session(handle.id)
    session.add_user_message("go")
    node = session.record_model_response(
        blocks=[
            {"type": "tool_use", "id": "b1", "name": "bash", "input": {"command": "touch x"}},
            {"type": "tool_use", "id": "r1", "name": "read", "input": {"path": "README.md"}},
        ],
        stop_reason="tool_use",
        usage={},
        provider="scripted",
        model="m",
    )
    for cid, name, inp in (
        ("b1", "bash", {"command": "touch x"}),
        ("r1", "read", {"path": "README.md"}),
    ):
        session.request_tool_call(node=node, tool_use_id=cid, name=name, input=inp)
        session.decide_permission(tool_use_id=cid, tool=name, subject="", decision="allow")
    h.app.save(session)

    again = h.reopen(handle.id, [turn(text("recovered"))])
    updates = collect(again, None)
    assert updates[-1].reason == "end_turn"  # type: ignore[attr-defined]
    results = h.of(handle, "ToolCallCompleted")
    assert [(r.tool_use_id, r.is_error) for r in results] == [("b1", True), ("r1", False)]
    assert results[0].output == INTERRUPTED_BY_CRASH
    assert results[1].output == "1\t# Demo"
    assert not (h.root / "x").exists()


def test_ctrl_c_cancels_a_run_and_records_it(h: Harness, tmp_path: Path) -> None:
    store = h.app.config.path
    h.app.close()
    slow = tmp_path / "slow.json"
    started = tmp_path / "started"
    marker = f"sleep 30.{os.getpid()}8"
    slow.write_text(
        json.dumps(
            {
                "turns": [
                    turn(tool("bash", command=f"{marker} & touch {started}; wait")),
                ]
            }
        )
    )
    # The marker is written outside the workspace: a writable place of the sandbox.
    config = user_config_dir() / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f"[sandbox]\nwritable = [{json.dumps(str(tmp_path))}]\n")
    env = {**os.environ, "CODER_ES_STORE": str(store), "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen(
        # --yes: the marker is written outside the workspace (where a sandboxed command
        # writes at once), which asks.
        cli("run", "wait", "--script", str(slow), "--json", "--yes", cwd=h.root),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 30
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:  # pragma: no cover
            proc.kill()
    assert proc.returncode == 130, err
    last = [json.loads(line) for line in out.splitlines()][-2:]
    assert [x["type"] for x in last] == ["cancelled", "turn_ended"]
    assert gone(marker)
    app = CoderApp(StoreConfig(backend="sqlite", path=store))
    try:
        sid = app.get_session(json.loads(out.splitlines()[0])["session_id"]).id
        kinds = [event_kind(e) for e in app.session_events(sid)]
        assert kinds[-2:] == ["TurnCancelled", "ToolCallCompleted"]
    finally:
        app.close()
