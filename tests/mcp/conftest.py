"""Fixtures of the MCP tests: the edge-case server written here, and the reference servers from
npm (``.ci/mcp-servers``; installed on first use, skipped with the reason when node or npm is
missing or the install fails)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from coder_es.config.values import McpServerConfig

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
NPM_DIR = REPO / ".ci" / "mcp-servers"
EDGE = HERE / "edge_server.py"
# This machine may be busy: starting Python with the SDK can take seconds.
START_S = 60.0


def edge_config(name: str = "edge", *args: str, **kwargs: object) -> McpServerConfig:
    return McpServerConfig(
        name=name,
        command=sys.executable,
        args=(str(EDGE), *args),
        startup_timeout_s=START_S,
        **kwargs,  # type: ignore[arg-type]
    )


@pytest.fixture(scope="session")
def npm_servers() -> Path:
    """The node_modules directory holding the reference servers."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip(
            "node and npm are needed for the reference MCP servers (apt install nodejs npm)"
        )
    modules = NPM_DIR / "node_modules" / "@modelcontextprotocol"
    if not (modules / "server-everything").is_dir() or not (modules / "server-filesystem").is_dir():
        try:
            done = subprocess.run(
                ["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(NPM_DIR)],
                capture_output=True,
                text=True,
                timeout=300,
            )
        except subprocess.TimeoutExpired:
            pytest.skip("npm install of the reference MCP servers took more than 300 s")
        if done.returncode != 0:
            pytest.skip(f"npm install of the reference MCP servers failed: {done.stderr[-500:]}")
    return modules


def everything_config(modules: Path, **kwargs: object) -> McpServerConfig:
    return McpServerConfig(
        name="everything",
        command="node",
        args=(str(modules / "server-everything" / "dist" / "index.js"),),
        startup_timeout_s=START_S,
        **kwargs,  # type: ignore[arg-type]
    )


def filesystem_config(modules: Path, root: Path) -> McpServerConfig:
    return McpServerConfig(
        name="fs",
        command="node",
        args=(str(modules / "server-filesystem" / "dist" / "index.js"), str(root)),
        startup_timeout_s=START_S,
    )
