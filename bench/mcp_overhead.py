"""MCP tool calls through coder-es against the same server called with the SDK directly.

One process, one event loop, two connections to two instances of the same stdio server (the
FastMCP server of tests/mcp/edge_server.py, or ``--node`` for the npm reference server
``server-everything``): the baseline calls ``ClientSession.call_tool`` itself; "through us"
runs the offered tool ``mcp__edge__echo`` the way the agent loop does (``LocalExecutor`` with the
session's registry: argument parsing, the manager, the connection, timeout and cancel handling,
rendering the result as tool output). The two alternate call by call, so load on the machine
hits both alike (and alternate which goes first).

    python3 bench/mcp_overhead.py                 200 calls each (after 20 warm-up calls)
    python3 bench/mcp_overhead.py --calls 500 --node

Printed: the first call's start-up (server start, initialize, tools/list: what the first turn
that needs the server pays), the median per call of both, and their ratio. Target: <= 1.2x.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

# This file is named like the SDK's package: its own directory must not shadow ``mcp``.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

from coder_es.config.values import McpServerConfig  # noqa: E402
from coder_es.mcp.manager import McpManager  # noqa: E402
from coder_es.mcp.tool import with_mcp_tools  # noqa: E402
from coder_es.tools.base import ToolCall, ToolContext  # noqa: E402
from coder_es.tools.registry import LocalExecutor, default_registry  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
EDGE = REPO / "tests" / "mcp" / "edge_server.py"
EVERYTHING = (
    REPO / ".ci" / "mcp-servers" / "node_modules" / "@modelcontextprotocol" / "server-everything"
)


def server(node: bool) -> tuple[McpServerConfig, str, dict[str, Any]]:
    if node:
        path = EVERYTHING / "dist" / "index.js"
        if not path.exists():
            sys.exit(f"{path} is missing: npm install --prefix .ci/mcp-servers")
        config = McpServerConfig(name="edge", command="node", args=(str(path),))
        return config, "echo", {"message": "hello"}
    config = McpServerConfig(name="edge", command=sys.executable, args=(str(EDGE),))
    return config, "echo", {"text": "hello"}


async def main(calls: int, warmup: int, node: bool) -> None:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    config, tool, args = server(node)
    config = McpServerConfig(**{**config.__dict__, "startup_timeout_s": 120.0})

    started = time.perf_counter()
    manager = McpManager([config])
    catalog = await manager.catalog(turn_start=True) or []
    startup_s = time.perf_counter() - started
    if catalog[0]["status"] != "ready":
        sys.exit(f"the server did not start: {catalog[0]['error']}")
    registry = with_mcp_tools(default_registry(), catalog, manager)
    executor = LocalExecutor(registry)
    call = ToolCall("bench", f"mcp__edge__{tool}", args)

    def ctx() -> ToolContext:
        return ToolContext(Path("."), "bench", None, None, tools=registry)  # type: ignore[arg-type]

    params = StdioServerParameters(command=config.command, args=list(config.args))
    with open(os.devnull, "w") as devnull:
        async with (
            stdio_client(params, errlog=devnull) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            await session.list_tools()
            ours: list[float] = []
            direct: list[float] = []

            async def through_us() -> float:
                t0 = time.perf_counter()
                result = await executor.execute(call, ctx())
                assert not result.is_error, result.output
                return time.perf_counter() - t0

            async def directly() -> float:
                t0 = time.perf_counter()
                raw = await session.call_tool(tool, args)
                assert not raw.isError, raw
                return time.perf_counter() - t0

            for i in range(warmup + calls):
                # Alternate which goes first, so neither always follows the other.
                if i % 2:
                    a, b = await through_us(), await directly()
                else:
                    b, a = await directly(), await through_us()
                if i >= warmup:
                    ours.append(a)
                    direct.append(b)
    await manager.aclose()

    ours_ms = statistics.median(ours) * 1000
    direct_ms = statistics.median(direct) * 1000
    kind = "node server-everything" if node else "python FastMCP edge server"
    print(f"server: {kind}; {calls} calls each after {warmup} warm-up calls")
    print(f"first call start-up (start, initialize, tools/list): {startup_s * 1000:.0f} ms")
    print(f"SDK directly:  median {direct_ms:.3f} ms per call")
    print(f"through us:    median {ours_ms:.3f} ms per call")
    print(f"ratio: {ours_ms / direct_ms:.3f}x (target <= 1.2x)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--node", action="store_true", help="use the npm server-everything")
    a = parser.parse_args()
    asyncio.run(main(a.calls, a.warmup, a.node))
