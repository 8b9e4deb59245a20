"""Fixtures of the MCP tests: the reference servers from npm (``.ci/mcp-servers``), installed on
first use, skipped with the reason when node or npm is missing or the install fails."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from mcp_helpers import NPM_DIR


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
