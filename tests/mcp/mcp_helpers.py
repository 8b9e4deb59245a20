"""Shared by the MCP tests: the edge-case server written here, the reference servers from npm
(``.ci/mcp-servers``), and server configurations for them."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

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


class Blobs:
    """What the tool context's workspace offers MCP results: a blob store (in memory)."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def put(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        self.data[digest] = data
        return digest


class Workspace:
    def __init__(self) -> None:
        self.blobs = Blobs()
