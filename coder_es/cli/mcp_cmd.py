"""``coder-es mcp list [--json]`` and ``coder-es mcp test NAME``: the configured MCP servers.

``list`` starts every enabled server, lists its tools (as the model would see them) and stops
it again; ``test NAME`` does the same for one server and says what is wrong: a server that does
not start is named with the end of its stderr, exit code 1.
"""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import replace
from typing import Any

from coder_es.cli.context import Context, print_json
from coder_es.config.values import McpServerConfig


def cmd_mcp(args: argparse.Namespace, ctx: Context) -> int:
    from coder_es.errors import UsageError

    if args.mcp_action == "list":
        if args.name is not None:
            raise UsageError(f"`coder-es mcp list` takes no server name (got {args.name!r})")
        return cmd_list(args, ctx)
    if not args.name:
        raise UsageError("`coder-es mcp test` needs the name of a server in [mcp_servers]")
    return cmd_test(args, ctx)


async def _entries(servers: list[McpServerConfig]) -> list[dict[str, Any]]:
    from coder_es.mcp.manager import McpManager

    manager = McpManager(servers)
    try:
        return await manager.catalog(turn_start=True) or []
    finally:
        await manager.aclose()


def _show(entry: dict[str, Any]) -> None:
    version = entry.get("version") or {}
    what = f" ({version.get('name')} {version.get('version')})" if version else ""
    print(f"{entry['name']}: {entry['status']}{what} [{entry['transport']}]")
    if entry.get("error"):
        for line in str(entry["error"]).splitlines():
            print(f"  {line}")
    for tool in entry.get("tools") or []:
        mapped = (
            f" (server name: {tool['tool']})" if not tool["name"].endswith(tool["tool"]) else ""
        )
        print(f"  {tool['name']}  [{tool['effect']}]{mapped}")


def cmd_list(args: argparse.Namespace, ctx: Context) -> int:
    from coder_es.cli.run import report_ignored

    report_ignored(ctx)
    servers = list(ctx.settings.mcp_servers.values())
    entries = asyncio.run(_entries(servers)) if servers else []
    if args.json:
        print_json({"servers": entries})
    elif not entries:
        print("no MCP servers configured ([mcp_servers.NAME] in a config file)")
    for entry in [] if args.json else entries:
        _show(entry)
    return 0


def cmd_test(args: argparse.Namespace, ctx: Context) -> int:
    from coder_es.config.suggest import did_you_mean
    from coder_es.errors import UsageError

    if args.name not in ctx.settings.mcp_servers:
        known = list(ctx.settings.mcp_servers)
        hint = did_you_mean(args.name, known) or (
            f"; configured: {', '.join(known)}" if known else "; none is configured"
        )
        raise UsageError(f"no MCP server named {args.name!r}{hint}")
    # Testing a disabled server is how one checks it before enabling it.
    server = replace(ctx.settings.mcp_servers[args.name], enabled=True)
    [entry] = asyncio.run(_entries([server]))
    if args.json:
        print_json(entry)
    else:
        _show(entry)
        if entry["status"] == "ready":
            print(f"{args.name}: OK, {len(entry['tools'])} tool(s)")
    return 0 if entry["status"] == "ready" else 1
