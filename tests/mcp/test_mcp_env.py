"""MCP servers run without coder-es's own variables (issue 29, item 4): no ``CODER_ES_*`` name
and no value of a coder-es key, even when the server's configured ``env`` passes one on."""

from __future__ import annotations

import asyncio
import base64
import shlex
import sys
from pathlib import Path

import pytest
from mcp_helpers import EDGE, START_S

from coder_es.config.values import McpServerConfig
from coder_es.mcp.manager import McpManager

SEALING_KEY = base64.b64encode(bytes(range(50, 82))).decode()


def test_a_stdio_server_sees_no_coder_es_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CODER_ES_SEALING_KEY", SEALING_KEY)
    monkeypatch.setenv("CODER_ES_SERVE_TOKEN", "tok-" + "Qw9xZ2" * 6)
    seen = tmp_path / "env.txt"
    script = f"env > {shlex.quote(str(seen))}; exec {shlex.quote(sys.executable)} {EDGE}"
    config = McpServerConfig(
        name="envprobe",
        command="/bin/sh",
        args=("-c", script),
        env={"PASSED_ON": SEALING_KEY, "CODER_ES_SEALING_KEY": SEALING_KEY, "OWN": "yes"},
        startup_timeout_s=START_S,
    )
    manager = McpManager([config])

    async def go() -> list[dict[str, object]]:
        try:
            return await manager.catalog(turn_start=True)
        finally:
            await manager.aclose()

    [entry] = asyncio.run(go())
    assert entry["status"] == "ready", entry
    env = seen.read_text()
    assert SEALING_KEY not in env and "CODER_ES_" not in env
    assert "OWN=yes" in env
