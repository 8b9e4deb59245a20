"""A small MCP server (FastMCP, stdio) for the edge cases the reference servers do not have:
errors, slow tools, progress, cancellation, list changes, a server that dies.

``python edge_server.py [--fail-start]``; ``--fail-start`` writes to stderr and exits at once.
"""

from __future__ import annotations

import asyncio
import os
import sys

if "--fail-start" in sys.argv:
    print("edge: cannot open the frobnicator config", file=sys.stderr)
    sys.exit(3)

from mcp.server.fastmcp import Context, FastMCP
from mcp.types import ToolAnnotations

server = FastMCP("edge", log_level="WARNING")
CANCELLED_MARK = os.environ.get("EDGE_CANCELLED_MARK", "")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def echo(text: str) -> str:
    """Say the text back."""
    return f"echo: {text}"


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True))
def wipe(target: str) -> str:
    """Pretend to delete something."""
    return f"wiped {target}"


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
def note(text: str) -> str:
    """Write a note (not destructive)."""
    return f"noted {text}"


@server.tool()
def fail(reason: str) -> str:
    """Always fails."""
    raise ValueError(f"it failed: {reason}")


@server.tool()
async def slow(seconds: float, ctx: Context) -> str:  # type: ignore[type-arg]
    """Sleep, reporting progress; leaves a mark file if cancelled."""
    steps = 4
    try:
        for i in range(steps):
            await ctx.report_progress(i, steps, f"step {i}")
            await asyncio.sleep(seconds / steps)
    except asyncio.CancelledError:
        if CANCELLED_MARK:
            with open(CANCELLED_MARK, "w") as f:
                f.write("cancelled")
        raise
    return f"slept {seconds}"


@server.tool()
def structured(n: int) -> dict[str, int]:
    """Structured output."""
    return {"n": n, "square": n * n}


@server.tool()
async def add_tool(name: str, ctx: Context) -> str:  # type: ignore[type-arg]
    """Add a tool and tell the client the list changed."""

    def added() -> str:
        return f"I am {name}"

    server.add_tool(added, name=name, description=f"added at run time: {name}")
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def pid() -> int:
    """This server's process id."""
    return os.getpid()


@server.tool()
def die(code: int) -> str:
    """Exit the server process at once."""
    print(f"edge: dying with {code}", file=sys.stderr, flush=True)
    os._exit(code)


if __name__ == "__main__":
    server.run("stdio")
