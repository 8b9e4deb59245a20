"""``coder-es mcp list``, ``coder-es mcp test`` and ``coder-es run`` with configured servers."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from mcp_helpers import EDGE, START_S

from coder_es.cli.main import main


def _user_config(text: str) -> None:
    path = Path(os.environ["XDG_CONFIG_HOME"]) / "coder-es" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


SERVERS = f"""
[mcp_servers.edge]
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(EDGE))}]
startup_timeout_s = {START_S}
env = {{ EDGE_TOKEN = "edge-secret-0123456789" }}
disabled_tools = ["die", "add_tool"]

[mcp_servers.broken]
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(EDGE))}, "--fail-start"]
"""


def test_list_and_test(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _user_config(SERVERS)
    assert main(["--workspace", str(tmp_path), "mcp", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["servers"]
    edge, broken = listed
    assert (edge["name"], edge["status"]) == ("edge", "ready")
    names = [t["name"] for t in edge["tools"]]
    assert "mcp__edge__echo" in names and "mcp__edge__die" not in names
    assert broken["status"] == "failed" and "frobnicator" in broken["error"]
    assert "edge-secret" not in json.dumps(listed)

    assert main(["--workspace", str(tmp_path), "mcp", "test", "broken"]) == 1
    out = capsys.readouterr().out
    assert "broken: failed" in out and "cannot open the frobnicator config" in out
    assert main(["--workspace", str(tmp_path), "mcp", "test", "edg"]) == 2
    assert "did you mean 'edge'" in capsys.readouterr().err


def test_run_offers_and_calls_the_configured_servers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _user_config(SERVERS.split("[mcp_servers.broken]")[0])
    script = tmp_path / "turns.json"
    turns = [
        {"blocks": [{"type": "tool_use", "name": "mcp__edge__echo", "input": {"text": "hi"}}]},
        {"blocks": [{"type": "text", "text": "done"}]},
    ]
    script.write_text(json.dumps(turns))
    argv = ["--workspace", str(tmp_path), "--backend", "sqlite", "run", "go", "--json"]
    assert main([*argv, "--provider", "scripted", "--script", str(script)]) == 0
    updates = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line]
    done = next(u for u in updates if u["type"] == "tool_completed")
    assert done["name"] == "mcp__edge__echo" and done["output"].startswith("echo: hi")


def test_a_server_that_never_starts_is_named_with_its_cause(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Not an exception class name ("BrokenResourceError"): what happened, in words.
    _user_config(
        '[mcp_servers.gone]\ncommand = "no-such-mcp-server-binary"\n'
        '[mcp_servers.quits]\ncommand = "false"\n'
    )
    assert main(["--workspace", str(tmp_path), "mcp", "list"]) == 0
    out = capsys.readouterr().out
    assert "Error" not in out
    assert "no-such-mcp-server-binary: No such file or directory" in out
    assert "quits: failed" in out and ("exited" in out)
