"""The client against a FastMCP server written for the edge cases: results of every kind,
errors, progress, timeouts, cancellation, tools/list_changed, a server that dies or never starts.
One server for the module (its start-up is the slow part)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_helpers import Workspace, edge_config

from coder_es.mcp.manager import McpManager
from coder_es.tools.base import ToolContext


def _ctx(progress: list[str] | None = None) -> ToolContext:
    return ToolContext(
        root=Path("."),
        tool_use_id="t1",
        sink=None,  # type: ignore[arg-type]
        workspace=Workspace(),
        progress=(progress.append if progress is not None else (lambda _t: None)),
    )


@pytest.fixture(scope="module")
def runner() -> Iterator[asyncio.Runner]:
    with asyncio.Runner() as r:
        yield r


@pytest.fixture(scope="module")
def mark(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("edge") / "cancelled"


@pytest.fixture(scope="module")
def edge(runner: asyncio.Runner, mark: Path) -> Iterator[McpManager]:
    manager = McpManager([edge_config(env={"EDGE_CANCELLED_MARK": str(mark)}, tool_timeout_s=1.5)])
    runner.run(manager.catalog(turn_start=True))
    yield manager
    runner.run(manager.aclose())


def _call(
    runner: asyncio.Runner, m: McpManager, tool: str, ctx: ToolContext | None = None, **args: Any
):  # type: ignore[no-untyped-def]
    return runner.run(m.call("edge", tool, args, ctx or _ctx()))


def test_the_catalog_names_tools_with_their_effects(
    runner: asyncio.Runner, edge: McpManager
) -> None:
    [entry] = runner.run(edge.catalog())
    assert entry["status"] == "ready" and entry["version"]["name"] == "edge"
    effects = {t["name"]: t["effect"] for t in entry["tools"]}
    assert effects["mcp__edge__echo"] == "read_only"
    assert effects["mcp__edge__wipe"] == "destructive"
    assert effects["mcp__edge__note"] == "write"
    assert effects["mcp__edge__fail"] == "destructive"  # no annotations: the spec's default
    echo = next(t for t in entry["tools"] if t["tool"] == "echo")
    assert echo["input_schema"]["properties"]["text"]["type"] == "string"
    assert echo["input_schema"]["required"] == ["text"]


def test_text_structured_and_error_results(runner: asyncio.Runner, edge: McpManager) -> None:
    ok = _call(runner, edge, "echo", text="hi")
    assert (ok.output.splitlines()[0], ok.is_error) == ("echo: hi", False)
    structured = _call(runner, edge, "structured", n=3)
    assert '"square": 9' in structured.output and not structured.is_error
    failed = _call(runner, edge, "fail", reason="on purpose")
    assert failed.is_error and "it failed: on purpose" in failed.output
    unknown = _call(runner, edge, "nosuch")
    assert unknown.is_error and "nosuch" in unknown.output


def test_progress_notifications_reach_the_tool_progress(
    runner: asyncio.Runner, edge: McpManager
) -> None:
    seen: list[str] = []
    result = _call(runner, edge, "slow", _ctx(seen), seconds=0.2)
    assert not result.is_error, result.output
    assert seen[:2] == ["0/4 step 0", "1/4 step 1"]


def test_a_call_past_tool_timeout_s_fails_and_is_cancelled_on_the_server(
    runner: asyncio.Runner, edge: McpManager, mark: Path
) -> None:
    mark.unlink(missing_ok=True)
    result = _call(runner, edge, "slow", seconds=30)
    assert result.is_error and "timed out after 1.5 s" in result.output
    runner.run(_until(mark.exists))
    # The server is still usable.
    assert _call(runner, edge, "echo", text="after").output.startswith("echo: after")


def test_cancelling_the_call_sends_the_protocol_cancel(
    runner: asyncio.Runner, edge: McpManager, mark: Path
) -> None:
    mark.unlink(missing_ok=True)

    async def cancel_soon() -> None:
        task = asyncio.ensure_future(edge.call("edge", "slow", {"seconds": 30}, _ctx()))
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await _until(mark.exists)

    runner.run(cancel_soon())
    assert mark.read_text() == "cancelled"


def test_tools_list_changed_is_listed_again(runner: asyncio.Runner, edge: McpManager) -> None:
    assert not _call(runner, edge, "add_tool", name="fresh").is_error
    runner.run(_until(lambda: edge.connections["edge"].list_changed))
    [entry] = runner.run(edge.catalog())
    assert "mcp__edge__fresh" in [t["name"] for t in entry["tools"]]
    assert _call(runner, edge, "fresh").output.startswith("I am fresh")


def test_a_server_that_dies_is_reported_with_its_stderr_and_restarted_next_turn(
    runner: asyncio.Runner,
) -> None:
    manager = McpManager([edge_config("mortal")])
    try:
        runner.run(manager.catalog(turn_start=True))
        pid = _pid(runner, manager, "mortal")
        died = runner.run(manager.call("mortal", "die", {"code": 7}, _ctx()))
        assert died.is_error
        assert "MCP server 'mortal' exited or crashed" in died.output
        assert "edge: dying with 7" in died.output
        [entry] = runner.run(manager.catalog())
        assert entry["status"] == "failed" and "dying with 7" in entry["error"]
        assert entry["tools"] == []
        [entry] = runner.run(manager.catalog(turn_start=True))
        assert entry["status"] == "ready"
        new_pid = _pid(runner, manager, "mortal")
        assert new_pid != pid
    finally:
        runner.run(manager.aclose())
    # Shut down with the session: no server process outlives it.
    runner.run(_until(lambda: not _running(new_pid)))


def test_a_server_that_cannot_start_is_named_with_its_stderr(runner: asyncio.Runner) -> None:
    manager = McpManager([edge_config("broken", "--fail-start")])
    try:
        [entry] = runner.run(manager.catalog(turn_start=True))
    finally:
        runner.run(manager.aclose())
    assert entry["status"] == "failed"
    assert entry["error"].startswith("MCP server 'broken' ")
    assert "cannot open the frobnicator config" in entry["error"]


def test_disabled_and_filtered(runner: asyncio.Runner) -> None:
    manager = McpManager([edge_config("off", enabled=False)])
    [entry] = runner.run(manager.catalog(turn_start=True))
    assert entry["status"] == "disabled" and not manager.connections


def _pid(runner: asyncio.Runner, manager: McpManager, server: str) -> int:
    result = runner.run(manager.call(server, "pid", {}, _ctx()))
    return int(result.output.splitlines()[0])


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


async def _until(check: Any, timeout: float = 20) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {check}")
        await asyncio.sleep(0.05)
