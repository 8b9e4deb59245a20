"""``coder-es sessions``, ``show`` and ``doctor``: what is in the store."""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from coder_es._version import __version__
from coder_es.cli.context import Context, NoStoreError, print_json
from coder_es.cli.plain import columns, printable
from coder_es.errors import CoderESError, UsageError
from coder_es.records import event_kind, event_record, summarize


def cmd_sessions(args: argparse.Namespace, ctx: Context) -> int:
    delete = getattr(args, "delete", None)
    change = delete or getattr(args, "restore", None)
    deleted = bool(getattr(args, "deleted", False))
    try:
        if change:
            app = ctx.app
        else:
            sessions = ctx.session_summaries(archived=deleted)
    except NoStoreError as e:
        if ctx.settings.origin("store.path") is not None:
            raise  # a store the user named (--store, $CODER_ES_STORE, a config file)
        # Listing where nothing was ever recorded is not an error: say where we looked.
        if not args.json:
            print(f"no sessions: {e}")
        return 0
    if change:
        sid = app.resolve_session(change)
        done = app.archive_session(sid, by="user", archived=bool(delete))
        verb = "deleted" if delete else "restored"
        print(f"session {sid} {verb}" if done else f"session {sid} was already {verb}")
        return 0
    if args.json:
        for s in sessions:
            print_json(
                {
                    "id": str(s.id),
                    "title": s.title,
                    "workspace": s.workspace,
                    "agent": s.agent,
                    "provider": s.provider,
                    "model": s.model,
                    "started_at": s.started_at.isoformat(),
                    "parent_session": s.parent_session,
                    "parent_node": s.parent_node,
                    "deleted": s.archived,
                }
            )
        return 0
    if not sessions:
        which = "deleted sessions" if deleted else "sessions"
        print(f"no {which} in {ctx.config.describe()}")
        return 0
    ordered = _as_tree(sessions) if args.tree else [(0, s) for s in sessions]
    rows = [
        (
            "  " * depth + str(s.id)[:8],
            s.started_at.strftime("%Y-%m-%d %H:%M"),
            s.agent,
            s.model,
            (s.parent_session or "")[:8],
            s.title,
        )
        for depth, s in ordered
    ]
    for line in columns(("id", "started", "agent", "model", "parent", "title"), rows):
        print(line)
    return 0


def _as_tree(sessions: list[Any]) -> list[tuple[int, Any]]:
    """Sessions depth first, each under its parent (forks and subagents), in start order."""
    known = {str(s.id) for s in sessions}
    children: dict[str | None, list[Any]] = {}
    for s in sessions:
        parent = s.parent_session if s.parent_session in known else None
        children.setdefault(parent, []).append(s)
    out: list[tuple[int, Any]] = []
    stack = [(0, s) for s in reversed(children.get(None, []))]
    while stack:
        depth, s = stack.pop()
        out.append((depth, s))
        stack += [(depth + 1, c) for c in reversed(children.get(str(s.id), []))]
    return out


def _tokens(usage: dict[str, int], cost: str) -> str:
    return f"in={usage.get('input_tokens', 0)} out={usage.get('output_tokens', 0)} {cost}"


def _usage_line(ctx: Context, session: Any, events: list[Any]) -> str:
    """Tokens and dollars: the session's own and, when it started subagents, theirs and the
    total. A model with no known price makes its figure ``unknown`` and is named."""
    # Imported here: `sessions` shares this module and must not load the projections.
    from coder_es.domain.session import Session
    from projections.usage import dollars, usage_of

    usage = usage_of(ctx.app, session, ctx.settings.price_table(), events=events)
    own = _tokens(usage.own, dollars(usage.own_cost))
    if any(isinstance(e, Session.TaskStarted) for e in events):
        line = (
            f"usage  own {own}  subagents "
            f"{_tokens(usage.subagents, dollars(usage.subagents_cost))}  "
            f"total {_tokens(usage.total, dollars(usage.total_cost))}"
        )
    else:
        line = f"usage  {own}"
    if usage.unpriced:
        line += f"  (no price for {', '.join(usage.unpriced)}: see [models.NAME] in the config)"
    return line


def cmd_show(args: argparse.Namespace, ctx: Context) -> int:
    if args.path is not None or args.proposed:
        return _show_file(args, ctx)
    if args.node is not None:
        return _show_node(args, ctx)
    from coder_es.domain.session import Session

    session = ctx.app.get_session(args.session)
    events = ctx.app.session_events(session.id)
    if args.json:
        for event in events:
            print_json(event_record(event))
        return 0
    # Not a terminal: lines are never wrapped (`show S | wc -l` counts events, not screen rows).
    lines = [f"session {session.id}  head={session.head}  events={len(events)}"]
    if any(isinstance(e, Session.ModelResponded) for e in events):
        lines.append(_usage_line(ctx, session.id, events))
    lines += [
        f"{event.originator_version:>5}  {event.timestamp:%H:%M:%S}  "
        f"{event_kind(event):<20} {summarize(event, 90)}"
        for event in events
    ]
    if not sys.stdout.isatty():
        # A pipe or a file: plain lines, never wrapped (`show S | wc -l` counts events), and
        # without rich, whose import and per-line rendering are most of the command's time.
        sys.stdout.write("".join(f"{printable(line)}\n" for line in lines))
        return 0
    from rich.console import Console

    console = Console()
    for line in lines:
        console.print(line, markup=False, highlight=False)
    return 0


def _show_node(args: argparse.Namespace, ctx: Context) -> int:
    """One node printed whole: every text, tool input and output in full (a listing shortens)."""
    session = ctx.app.get_session(args.session)
    node = session.resolve_node(args.node)
    events = ctx.app.session_events(session.id)
    event = next((e for e in events if str(e.originator_version) == node), None)
    if event is None:
        raise UsageError(f"session {str(session.id)[:8]} has no event at node {node}")
    if args.json:
        print_json(event_record(event))
        return 0
    fields = event_record(event)["fields"]
    lines = [f"node {node}  {event_kind(event)}  {event.timestamp:%Y-%m-%d %H:%M:%S}"]
    kind = event_kind(event)
    if kind == "UserMessageAdded":
        lines += [b.get("text", f"[{b.get('type')}]") for b in fields["content"]]
    elif kind == "ModelResponded":
        lines.append(f"stop: {fields['stop_reason']}")
        for block in fields["blocks"]:
            if block.get("type") == "text":
                lines.append(block["text"])
            elif block.get("type") == "thinking":
                lines.append(f"[thinking] {block.get('thinking', '')}")
            elif block.get("type") == "tool_use":
                lines.append(f"[{block['name']}] {json.dumps(block['input'], indent=2)}")
            else:
                lines.append(f"[{block.get('type')}] {json.dumps(block, indent=2)}")
    elif kind == "ToolCallCompleted":
        lines.append(f"{fields['name']}{' (error)' if fields['is_error'] else ''}")
        output = fields["output"]
        if fields.get("output_blob"):
            # The event holds a capped output; the whole one is a blob beside it.
            output = ctx.app.blobs.get(fields["output_blob"]).decode("utf-8", "replace")
        lines.append(output)
        for change in fields.get("files_changed") or ():
            lines.append(f"changed {change.get('path')}")
    else:
        lines.append(json.dumps({k: v for k, v in fields.items() if k != "prev_hash"}, indent=2))
    sys.stdout.write("".join(f"{line}\n" for line in lines))
    return 0


def _show_file(args: argparse.Namespace, ctx: Context) -> int:
    from coder_es.views.files import content_at, proposed_at, workspace_path
    from projections.files import open_files

    if args.path is None:
        raise UsageError("show SESSION NODE PATH [--proposed] prints one file")
    session = ctx.app.get_session(args.session)
    node = session.resolve_node(args.node)
    path = workspace_path(ctx.workspace, args.path)
    if args.proposed:
        data = proposed_at(ctx.app, session.id, node, path)
        author: str
        since: str | None
        author, since = "session", node  # the agent's or the command's own version
    else:
        files = open_files(ctx.app, session.id)
        data = content_at(ctx.app, files, str(session.id), node, path)
        author, since = files.origin_at(node, path)
    if args.json:
        print_json(_file_record(str(session.id), node, path, data, author, since, args.proposed))
        return 0
    if author == "user":
        # Not the session's bytes: say where they come from (stderr: stdout is the file).
        print(f"{path} at node {node}: {_users_bytes(since)}", file=sys.stderr)
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.flush()
    return 0


def _users_bytes(since: str | None) -> str:
    """Where the user's bytes of a file at a node come from (``FileStates.origin_at``)."""
    if since is None:
        return (
            "as on the user's disk when the session first saw it "
            "(no node of the session changed it up to there)"
        )
    return (
        f"as on the user's disk when the session took it at node {since} "
        "(the user's version, before the session's change there)"
    )


def _file_record(
    session: str,
    node: str,
    path: str,
    data: bytes,
    author: str,
    since: str | None,
    proposed: bool,
) -> dict[str, Any]:
    """``show S N PATH --json``: the file with where its bytes come from. ``author``: "session"
    (an agent's edit, a command's result, a restoration) or "user" (the user's disk);
    ``recorded_at``: the node whose entry gives them (None: the start of the session)."""
    from coder_es.store.blobs import digest_of

    record: dict[str, Any] = {
        "session": session,
        "node": node,
        "path": path,
        "author": author,
        "recorded_at": since,
        "proposed": proposed,
        "hash": digest_of(data),
    }
    try:
        record["text"] = data.decode("utf-8")
    except UnicodeDecodeError:
        record["base64"] = base64.b64encode(data).decode("ascii")
    return record


def cmd_doctor(args: argparse.Namespace, ctx: Context) -> int:
    """Findings, not exceptions: a configuration with problems, a missing or unreadable store
    are reported (exit 1) with everything else doctor could still find out."""
    report: dict[str, Any] = {
        "version": __version__,
        "workspace": str(ctx.workspace),
        "backend": ctx.config.backend,
        "store": ctx.config.describe(),
        "config_files": [str(p) for p in _config_files(ctx)],
    }
    has_store = ctx.config.backend in ("postgres", "popo") or ctx.config.exists()
    if has_store:
        report["durable"] = ctx.config.durable
    problems: list[str] = []
    notes: list[str] = []
    if ctx.config_error is not None:
        problems += [f"config: {p}" for p in ctx.config_error.problems]
        notes.append("the configuration has problems: the rest uses the defaults")
    started = time.perf_counter()
    try:
        app = ctx.app
        report["sessions"] = len(app.list_sessions(archived=None))
        report["max_notification_id"] = app.recorder.max_notification_id()
    except NoStoreError as e:
        notes.append(str(e))
    except Exception as e:  # doctor reports every failure instead of raising
        problems.append(f"store: {e}")
    report["open_ms"] = round((time.perf_counter() - started) * 1000, 1)
    report["providers"] = {
        "anthropic": bool(os.environ.get("ANTHROPIC_API_KEY")),
        "openai": bool(os.environ.get("OPENAI_API_KEY")),
        "openai-responses": bool(os.environ.get("OPENAI_API_KEY")),
        "ollama": os.environ.get("OLLAMA_HOST", "http://127.0.0.1:11434"),
        "scripted": True,
    }
    report["trust"] = _trust_status(ctx)
    # Not a problem: the user may never want to trust it. Listed so nobody wonders why a
    # project's allow rule does not apply.
    report["ignored"] = ctx.settings.ignored_lines()
    report["shell_sandbox"] = _shell_sandbox(ctx)
    from coder_es.cli.doctor_sandbox import sandbox_lines, sandbox_places

    contained = report["shell_sandbox"]["mode"] == "namespaces+overlay"
    report["sandbox"] = sandbox_places(ctx.settings.sandbox, Path(ctx.workspace), contained)
    report["problems"] = problems
    report["notes"] = notes
    report["healthy"] = not problems
    if args.json:
        print_json(report)
        return 0 if not problems else 1
    for key, value in report.items():
        if key in ("problems", "notes", "ignored", "sandbox"):
            continue
        if key == "store" and not has_store:
            value = f"{value} (none yet: `coder-es run`, `chat` or `demo` create it)"
        elif key == "shell_sandbox":
            value = f"{value['mode']} ({value['why']})" if value.get("why") else value["mode"]
        print(f"{key:>20}: {_plain(value)}")
    for line in sandbox_lines(report["sandbox"]):
        print(line)
    for line in report["ignored"]:
        print(f"ignored: {line}")
    for note in notes:
        print(f"note: {note}")
    for problem in problems:
        print(f"problem: {problem}")
    return 0 if not problems else 1


def _config_files(ctx: Context) -> list[Path]:
    """The config files in force; with a broken configuration (the defaults in use), the files
    that are there all the same, so that the report names what to mend."""
    if ctx.config_error is None:
        return list(ctx.settings.files)
    from coder_es.config.load import config_paths

    return [p for p in config_paths(ctx.workspace) if p.is_file()]


def _trust_status(ctx: Context) -> str:
    trust = ctx.settings.trust
    if trust is not None:
        return str(trust.status)
    from coder_es.config.load import project_config_path

    project = project_config_path(ctx.workspace)
    if not project.is_file():
        return "no project config"
    # A broken project config still has a trust state: the file is there, trusted or not.
    from coder_es.config.hook_scripts import project_trust
    from coder_es.config.trust import TrustStore

    try:
        return str(
            TrustStore().state(project, *project_trust(project, project.read_bytes())).status
        )
    except (OSError, CoderESError) as e:
        return f"unknown ({e})"


def _plain(value: Any) -> str:
    """A report value as a person reads it (never a Python repr)."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_plain(v)}" for k, v in value.items()) or "-"
    if isinstance(value, list):
        return ", ".join(_plain(v) for v in value) or "-"
    return str(value)


def _shell_sandbox(ctx: Context) -> dict[str, str]:
    """How bash runs here and why. The probe runs next to the store when there is one; doctor
    creates no store, so elsewhere it runs in a temporary directory."""
    import tempfile

    from coder_es.sandbox import SandboxSettings, availability

    settings = SandboxSettings(mode="off" if ctx.settings.sandbox.mode == "off" else "auto")
    workspace = Path(ctx.workspace)
    if (workspace / ".coder-es").is_dir():
        found = availability(settings, workspace)
    else:
        with tempfile.TemporaryDirectory(prefix="coder-es-probe-") as scratch:
            found = availability(settings, Path(scratch))
    return {"mode": found.mode, "why": found.reason}
