"""The client against the reference servers nobody here wrote (npm: server-everything and
server-filesystem): tools listed with their annotations, text and image results, errors."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_helpers import Workspace, everything_config, filesystem_config

from coder_es.mcp.manager import McpManager
from coder_es.tools.base import ToolContext


@pytest.fixture(scope="module")
def servers(
    npm_servers: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[asyncio.Runner, McpManager, Path]]:
    root = tmp_path_factory.mktemp("fsroot").resolve()
    (root / "notes.txt").write_text("first line\nsecond line\n")
    manager = McpManager([everything_config(npm_servers), filesystem_config(npm_servers, root)])
    with asyncio.Runner() as runner:
        runner.run(manager.catalog(turn_start=True))
        yield runner, manager, root
        runner.run(manager.aclose())


def _call(servers: Any, server: str, tool: str, **args: Any) -> Any:
    runner, manager, _ = servers
    ctx = ToolContext(Path("."), "t", None, Workspace())  # type: ignore[arg-type]
    return runner.run(manager.call(server, tool, args, ctx)), ctx.workspace.blobs.data


def test_both_servers_list_their_tools(servers: Any) -> None:
    runner, manager, _ = servers
    everything, fs = runner.run(manager.catalog())
    assert everything["status"] == fs["status"] == "ready", (everything["error"], fs["error"])
    effects = {t["name"]: t["effect"] for t in fs["tools"]}
    assert effects["mcp__fs__read_text_file"] == "read_only"
    assert effects["mcp__fs__write_file"] == "destructive"
    assert "mcp__everything__echo" in {t["name"] for t in everything["tools"]}
    assert fs["version"]["name"] and everything["version"]["version"]


def test_text_results(servers: Any) -> None:
    result, _ = _call(servers, "everything", "echo", message="hello")
    assert not result.is_error and "hello" in result.output
    root = servers[2]
    read, _ = _call(servers, "fs", "read_text_file", path=str(root / "notes.txt"))
    assert read.output.startswith("first line\nsecond line")


def test_an_image_goes_to_the_blob_store(servers: Any) -> None:
    result, blobs = _call(servers, "everything", "get-tiny-image")
    assert not result.is_error
    assert "[image image/png" in result.output
    [(digest, data)] = blobs.items()
    assert digest in result.output and data.startswith(b"\x89PNG")


def test_a_refused_call_is_an_error_result(servers: Any) -> None:
    result, _ = _call(servers, "fs", "read_text_file", path="/etc/passwd")
    assert result.is_error and "denied" in result.output.lower()
