"""``coder-es deps`` (the workspace dependency graph) and ``coder-es context`` (what the next
model request of a session would hold, part by part, with token counts)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any
from uuid import UUID

from rich.console import Console
from rich.table import Table

from coder_es.cli.context import Context, print_json
from coder_es.cli.progress import shown, working
from coder_es.errors import CoderESError, UsageError
from coder_es.providers.types import canonical_request
from projections.context import (
    BuiltContext,
    ContextBuilder,
    ContextSettings,
    ContextState,
    RelatedCode,
    graph_related,
    session_context,
)

INSTRUCTIONS_MARK = "\n\n# Instructions from "


# ---------------------------------------------------------------------- deps


def _graph(root: Path) -> Any:
    from projections.depgraph import DepGraph

    return DepGraph.build(root)


def cmd_deps(args: argparse.Namespace, ctx: Context) -> int:
    if args.path == "":
        raise UsageError("deps needs a directory, not an empty path")
    root = Path(args.path).resolve() if args.path is not None else ctx.workspace
    if not root.is_dir():
        msg = f"{args.path} is not a directory"
        raise UsageError(msg)
    with working(f"reading the dependency graph of {root}", shown(args.json)):
        graph = _graph(root)
    if args.json:
        print_json(graph.to_json())
        return 0
    edges = 0
    for path in graph.files:
        deps = graph.direct_dependencies(path)
        edges += len(deps)
        print(path)
        for dep in deps:
            print(f"  -> {dep}")
    print(f"{len(graph)} files, {edges} dependencies")
    return 0


# ---------------------------------------------------------------------- context


def split_prompt(prompt: str) -> tuple[str, str]:
    """The recorded system prompt as (system, instructions): instructions start at the first
    ``# Instructions from`` section (``agent.prompt.gather_prompt``'s layout)."""
    at = prompt.find(INSTRUCTIONS_MARK)
    if at < 0:
        return prompt, ""
    return prompt[:at], prompt[at + 2 :]


def _settings(ctx: Context, state: ContextState, events: list[Any]) -> ContextSettings:
    from coder_es.agent.prompt import recorded_prompt
    from coder_es.agent.settings import SettingsConfig, session_settings
    from coder_es.tools.registry import default_registry

    registry = default_registry()
    config = SettingsConfig(tools=registry)
    try:
        # What the loop offers this session (``task`` only where it recorded subagents).
        settings = session_settings(events, config)
        tools = settings.tools if settings.tools is not None else registry
        names, max_tokens = settings.offered, settings.max_tokens
        model = settings.model
    except UsageError:
        # An agent this version does not know: show every tool.
        from coder_es.tools.offered import session_registry

        tools, names = session_registry(registry, state.settings), None
        max_tokens = int(state.settings.get("max_tokens", config.max_tokens))
        model = state.model
    system, instructions = split_prompt(
        recorded_prompt(state.settings, ctx.app.blobs, state.workspace or str(ctx.workspace))
    )
    return ContextSettings(
        model=model or "unknown",
        system=system,
        tools=tools.definitions(names),
        max_tokens=max_tokens,
        instructions=instructions,
    )


def _related(workspace: str) -> RelatedCode | None:
    root = Path(workspace)
    if not workspace or not root.is_dir():
        return None
    try:
        return graph_related(_graph(root))
    except CoderESError:
        return None


def cmd_context(args: argparse.Namespace, ctx: Context) -> int:
    if args.budget <= 0:
        msg = f"--budget must be a positive number of tokens, not {args.budget}"
        raise UsageError(msg)
    session = ctx.app.get_session(args.session)
    app = ctx.app
    events = app.session_events(session.id)
    state = session_context(events, lambda sid, lte: app.session_events(UUID(sid), lte=lte))
    builder = ContextBuilder(
        _settings(ctx, state, events), blobs=ctx.app.blobs, related=_related(state.workspace)
    )
    built = builder.build(state, budget=args.budget)
    if args.json:
        print_json(context_json(str(session.id), built))
    else:
        _print_context(str(session.id), built)
    return 0


def context_json(session: str, built: BuiltContext) -> dict[str, Any]:
    return {
        "session": session,
        "head": built.head,
        "budget": built.budget,
        "tokens": built.tokens,
        "parts": [{"name": p.name, "tokens": p.tokens, "items": p.items} for p in built.parts],
        "needs_compaction": built.needs_compaction,
        "full": list(built.full),
        "trimmed": list(built.trimmed),
        "condensed_units": built.condensed_units,
        "summaries": list(built.summaries),
        "files": [
            {"path": f.path, "hash": f.hash, "tokens": f.tokens, "truncated": f.truncated}
            for f in built.files
        ],
        "related": list(built.related),
        "request": canonical_request(built.request),
    }


def _preview(block: dict[str, Any], width: int = 70) -> str:
    kind = block.get("type", "?")
    if kind == "text":
        body = str(block.get("text", ""))
    elif kind == "tool_use":
        body = f"{block.get('name')} {block.get('input')}"
    elif kind == "tool_result":
        content = block.get("content", "")
        body = content if isinstance(content, str) else str(content)
    else:
        body = ""
    body = " ".join(body.split())
    return f"{kind}: {body[:width]}" + ("…" if len(body) > width else "")


def _print_context(session: str, built: BuiltContext) -> None:
    console = Console()
    console.print(
        f"session {session}  head={built.head}  {built.tokens} of {built.budget} tokens",
        markup=False,
        highlight=False,
    )
    table = Table(box=None)
    for col in ("part", "tokens", "share", "items"):
        table.add_column(col, justify="left" if col == "part" else "right")
    for p in built.parts:
        share = f"{100 * p.tokens / built.budget:.1f}%" if built.budget else "-"
        table.add_row(p.name, str(p.tokens), share, str(p.items))
    console.print(table)
    console.print(
        f"nodes in full: {len(built.full)}, trimmed: {len(built.trimmed)}, "
        f"condensed units: {built.condensed_units}, summaries: {list(built.summaries)}",
        markup=False,
        highlight=False,
    )
    if built.needs_compaction:
        console.print("older turns were condensed without a summary: compaction is due")
    for f in built.files:
        cut = " (truncated)" if f.truncated else ""
        console.print(f"file {f.path}  {f.tokens} tokens{cut}", markup=False, highlight=False)
    if built.related:
        console.print("related: " + ", ".join(built.related), markup=False, highlight=False)
    lines = [
        f"{i:>4} {message['role']:<9} {_preview(block)}"
        for i, message in enumerate(built.request.messages)
        for block in message["content"]
    ]
    if lines:  # one print: rich's cost is per call, and a request has a line per block
        console.print("\n".join(lines), markup=False, highlight=False)
