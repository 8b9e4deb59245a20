"""``coder-es acp`` driven by an editor written with the official TypeScript ACP SDK
(``@agentclientprotocol/sdk``, pinned in ``tests/clients/ts_client``), whose schemas check every
response and notification: initialize, session/new, a prompt, set_mode, a config option, list,
close, resume, delete. Installed with npm on first use (``.ci/run`` installs it too); skipped
with the reason when node or npm is missing or the install fails (no registry)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from client_helpers import REPO, child_env, cli, make_workspace, stored_events

TS_CLIENT = Path(__file__).resolve().parent / "ts_client"


@pytest.fixture(scope="module")
def ts_sdk() -> Path:
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are needed for the TypeScript ACP SDK (apt install nodejs npm)")
    sdk = TS_CLIENT / "node_modules" / "@agentclientprotocol" / "sdk"
    if not sdk.is_dir():
        try:
            done = subprocess.run(
                [
                    "npm",
                    "ci",
                    "--loglevel=error",
                    "--no-audit",
                    "--no-fund",
                    "--prefix",
                    str(TS_CLIENT),
                ],
                capture_output=True,
                text=True,
                timeout=300,
            )
        except subprocess.TimeoutExpired:
            pytest.skip("npm ci of the TypeScript ACP SDK took more than 300 s")
        if done.returncode != 0:
            said = " ".join((done.stderr + done.stdout).split())[:300]
            pytest.skip(f"npm ci of the TypeScript ACP SDK failed: {said}")
    return sdk


def test_the_typescript_sdk_drives_a_session_through_its_lifecycle(
    tmp_path: Path, ts_sdk: Path
) -> None:
    turns = [{"blocks": [{"type": "text", "text": "Hello from the script."}]}]
    ws = make_workspace(tmp_path, "", turns)
    agent = cli(ws, "acp", "--script", str(tmp_path / "script.json"), "--no-watch")
    done = subprocess.run(
        ["node", str(TS_CLIENT / "client.mjs"), str(ws), *agent],
        env=child_env(tmp_path),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.splitlines()[-1])

    assert seen["protocolVersion"] == 1 and seen["loadSession"] is True
    assert {"list", "delete", "resume", "close"} <= set(seen["sessionCapabilities"])
    assert seen["modes"]["currentModeId"] == "build"
    categories = {o["id"]: o["category"] for o in seen["configOptions"]}
    assert categories == {"mode": "mode", "model": "model"}
    assert (seen["stopReason"], seen["text"]) == ("end_turn", "Hello from the script.")
    # The commands come right after session/new, the usage after the model's response.
    assert seen["firstUpdates"][0] == "available_commands_update"
    assert seen["firstUpdates"][-1] == "usage_update"
    assert seen["usage"][0]["size"] > 0
    assert seen["afterSetMode"] == [
        {"kind": "current_mode_update", "mode": "plan"},
        {"kind": "config_option_update"},
    ]
    assert dict(seen["setConfigOption"])["mode"] == "explore"
    assert seen["listed"] == [True] and seen["listedUpdatedAt"]
    # After a close, resume opens it in the mode last chosen; delete hides it from the list.
    assert seen["resumedMode"] == "explore"
    assert seen["listedAfterDelete"] == 0

    events = stored_events(ws, seen["sessionId"])
    modes = [e.agent for e in events if type(e).__name__ == "SettingsChanged"]
    assert modes == ["plan", "explore"]
    assert [type(e).__name__ for e in events][-1] == "Archived"


def test_the_client_script_fails_on_an_agent_that_breaks_the_schema(
    tmp_path: Path, ts_sdk: Path
) -> None:
    # The harness can fail: an "agent" whose initialize answer lacks protocolVersion.
    fake = tmp_path / "fake_agent.py"
    fake.write_text(
        "import json, sys\n"
        "for line in sys.stdin:\n"
        "    msg = json.loads(line)\n"
        "    if 'id' in msg:\n"
        "        out = {'jsonrpc': '2.0', 'id': msg['id'], 'result': {'agentCapabilities': {}}}\n"
        "        print(json.dumps(out), flush=True)\n"
    )
    done = subprocess.run(
        ["node", str(TS_CLIENT / "client.mjs"), str(tmp_path), sys.executable, str(fake)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "ts client:" in done.stderr
