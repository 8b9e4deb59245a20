"""``coder-es hooks import|list|test``: bring Claude Code's hooks in, show what would run, run an
event's hooks on sample input.

``import`` reads the ``hooks`` of ``~/.claude/settings.json`` into the user config and those of
the workspace's ``.claude/settings.json`` into the project config (which, like any project
setting that runs commands, applies once ``coder-es trust`` recorded it). ``test`` runs the
hooks in the session sandbox, read-only: a test never changes the workspace.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from coder_es.cli.context import Context
from coder_es.errors import UsageError

SAMPLES: dict[str, dict[str, Any]] = {
    "PreToolUse": {"tool_name": "bash", "tool_input": {"command": "echo hello"}},
    "PermissionRequest": {"tool_name": "bash", "tool_input": {"command": "echo hello"}},
    "PostToolUse": {
        "tool_name": "write",
        "tool_input": {"path": "example.txt", "content": "hello\n"},
        "tool_output": "wrote example.txt",
    },
    "PostToolUseFailure": {
        "tool_name": "bash",
        "tool_input": {"command": "false"},
        "error": "[exit code 1]",
    },
    "UserPromptSubmit": {"prompt": "hello"},
    "SessionStart": {"source": "startup"},
    "SessionEnd": {"reason": "other"},
    "Stop": {"stop_hook_active": False},
    "SubagentStop": {"stop_hook_active": False},
    "PreCompact": {"trigger": "manual", "custom_instructions": ""},
    "Notification": {"message": "coder-es needs your permission to use bash"},
}


def cmd_hooks(args: argparse.Namespace, ctx: Context) -> int:
    action = args.hooks_action
    if action == "test" and args.event is None:
        raise UsageError("hooks test needs an EVENT (PreToolUse, Stop, ...)")
    if action != "test" and (args.event is not None or args.input is not None):
        raise UsageError(f"hooks {action} takes no EVENT or --input (those are for hooks test)")
    if action != "import" and args.source is not None:
        raise UsageError("--from is for hooks import")
    if args.hooks_action == "import":
        return _import(args, ctx)
    if args.hooks_action == "list":
        return _list(args, ctx)
    return _test(args, ctx)


def _import(args: argparse.Namespace, ctx: Context) -> int:
    from coder_es.config.load import project_config_path, user_config_path
    from coder_es.hooks.claude_settings import as_toml, hooks_of, read_settings

    home = Path.home()
    pairs = [
        (home / ".claude" / "settings.json", user_config_path()),
        (ctx.workspace / ".claude" / "settings.json", project_config_path(ctx.workspace)),
    ]
    if args.source:
        pairs = [(Path(args.source), user_config_path())]
    # Already configured (or configured and held back until trust): not imported twice.
    existing: set[tuple[str, str | None, str]] = {
        (h.event, h.matcher, h.command) for h in ctx.settings.hooks
    }
    existing |= {
        (str(i.path).split(".")[1], None, str(c))
        for i in ctx.settings.ignored
        if str(i.path).startswith("hooks.")
        for c in i.value
    }
    report: list[dict[str, Any]] = []
    for source, target in pairs:
        data = read_settings(source)
        if data is None:
            continue
        found = hooks_of(data, str(source))
        new = tuple(
            h
            for h in found.hooks
            if (h.event, h.matcher, h.command) not in existing
            and (h.event, None, h.command) not in existing
        )
        if new:
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("a", encoding="utf-8") as f:
                f.write(as_toml(new, str(source)))
        report.append(
            {
                "from": str(source),
                "to": str(target),
                "imported": [h.to_record() for h in new],
                "already": len(found.hooks) - len(new),
                "skipped": list(found.skipped),
            }
        )
    if args.json:
        print(json.dumps({"imports": report}))
        return 0
    if not report:
        print("no Claude Code settings found (~/.claude/settings.json, .claude/settings.json)")
        return 0
    for r in report:
        print(f"{r['from']} -> {r['to']}: {len(r['imported'])} hook(s) imported", end="")
        print(f", {r['already']} already there" if r["already"] else "")
        for h in r["imported"]:
            matcher = f" [{h['matcher']}]" if h["matcher"] else ""
            print(f"  {h['event']}{matcher}: {h['command']}")
        for line in r["skipped"]:
            print(f"  skipped: {line}")
        if r["imported"] and r["to"].endswith(".coder-es/config.toml"):
            print("  (project hooks run once you review the file and run `coder-es trust`)")
    return 0


def _list(args: argparse.Namespace, ctx: Context) -> int:
    from coder_es.hooks.plugins import installed

    held = [i for i in ctx.settings.ignored if str(i.path).startswith("hooks.")]
    if args.json:
        print(
            json.dumps(
                {
                    "hooks": [
                        h.to_record() | {"identity": h.identity, "digest": h.digest}
                        for h in ctx.settings.hooks
                    ],
                    "held_back": [
                        {"event": str(i.path)[6:], "commands": list(i.value), "why": i.reason}
                        for i in held
                    ],
                    "plugins": installed(),
                }
            )
        )
        return 0
    if not ctx.settings.hooks and not held:
        print("no hooks configured ([[hooks.EVENT]] in the config; `coder-es hooks import`)")
    for h in ctx.settings.hooks:
        matcher = f" matcher={h.matcher!r}" if h.matcher else ""
        extra = f" dialect={h.dialect}" if h.dialect != "coder-es" else ""
        extra += " on_failure=block" if h.on_failure == "block" else ""
        print(f"{h.event}[{h.index}]{matcher} timeout={h.timeout:g}s{extra}: {h.command}")
        print(f"    from {h.source or 'code'}, sha256 {h.digest[:16]}")
    for i in held:
        for command in i.value:
            print(f"{str(i.path)[6:]}: {command}  (held back: {i.reason}; `coder-es trust`)")
    plugins = installed()
    if plugins:
        print(f"plugins installed (coder_es.plugins): {', '.join(plugins)}")
    return 0


def _sample(event: str, path: str | None) -> dict[str, Any]:
    if path is None:
        return dict(SAMPLES[event])
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        data = json.loads(text)
    except OSError as e:
        raise UsageError(f"{path}: cannot read: {e.strerror}") from None
    except ValueError as e:
        raise UsageError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a JSON object (the hook input)")
    return data


def _test(args: argparse.Namespace, ctx: Context) -> int:
    from coder_es.hooks.dialect import from_claude_input, our_tool_name
    from coder_es.hooks.pipeline import EventInput
    from coder_es.hooks.spec import EVENTS, hooks_for

    event = args.event
    if event not in EVENTS:
        raise UsageError(f"unknown hook event {event!r}; one of: {', '.join(EVENTS)}")
    data = _sample(event, args.input)
    root = ctx.workspace
    tool = data.pop("tool_name", None)
    tool_input = data.pop("tool_input", None)
    for key in ("session_id", "transcript_path", "cwd", "permission_mode", "hook_event_name"):
        data.pop(key, None)
    if isinstance(tool, str):
        ours = our_tool_name(tool)
        if ours != tool and isinstance(tool_input, dict):
            tool_input = from_claude_input(ours, tool_input, root)
        tool = ours
    if "tool_response" in data and "tool_output" not in data:
        response = data.pop("tool_response")
        data["tool_output"] = response.get("output", "") if isinstance(response, dict) else ""
    ev = EventInput(
        event,
        "hooks-test",
        root,
        tool=tool if isinstance(tool, str) else None,
        tool_input=tool_input if isinstance(tool_input, dict) else None,
        tool_use_id="toolu_hooks_test" if isinstance(tool, str) else None,
        extra=data,
    )
    specs = ctx.settings.hooks
    if not hooks_for(specs, event, ev.tool):
        print(f"no hook runs for {event}" + (f" ({ev.tool})" if ev.tool else ""))
        return 0
    out = asyncio.run(_run(specs, ev, ctx))
    if args.json:
        print(json.dumps({"runs": out.records, "outcome": _outcome(out)}))
    else:
        for r in out.records:
            code = "timed out" if r["exit_code"] is None else f"exit {r['exit_code']}"
            print(f"{r['hook']}: {code} in {r['duration_ms']} ms")
            for key, value in r["effect"].items():
                print(f"    {key}: {value}")
            if r["output"].strip():
                print("    stdout: " + r["output"].strip()[:2000])
            if r["stderr"].strip():
                print("    stderr: " + r["stderr"].strip()[:2000])
        summary = {k: v for k, v in _outcome(out).items() if v}
        print("outcome: " + (json.dumps(summary) if summary else "no effect"))
    return 1 if out.decision == "deny" or out.blocked else 0


def _outcome(out: Any) -> dict[str, Any]:
    return {
        "decision": out.decision,
        "reason": out.reason,
        "updated_input": out.updated_input,
        "context": out.context,
        "feedback": out.feedback,
        "blocked": out.blocked,
        "stop_reason": out.stop_reason,
        "messages": out.messages,
    }


async def _run(specs: Any, ev: Any, ctx: Context) -> Any:
    from coder_es.hooks.command import run_hook
    from coder_es.hooks.pipeline import run_event
    from coder_es.sandbox import SandboxSettings
    from coder_es.store.blobs import MemoryBlobStore
    from coder_es.tools.base import ToolContext
    from coder_es.workspace.workspace import Workspace

    class _Sink:
        def observe_file(self, **_kw: Any) -> None: ...
        def apply_edit(self, **_kw: Any) -> None: ...

    sandbox = ctx.settings.sandbox
    settings = SandboxSettings(
        mode="off" if sandbox.mode == "off" else "auto", network=sandbox.network, read_only=True
    )
    sink = _Sink()
    tool_ctx = ToolContext(
        root=ctx.workspace,
        tool_use_id=ev.tool_use_id or "",
        sink=sink,
        workspace=Workspace(ctx.workspace, MemoryBlobStore(), sink),
        sandbox=settings,
    )

    async def run(spec: Any, payload: dict[str, Any]) -> Any:
        return await run_hook(spec, payload, tool_ctx)

    return await run_event(tuple(specs), replace(ev), run)
