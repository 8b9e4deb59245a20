"""The table of ``coder-es`` subcommands: name, handler, help text and arguments.

Start-up time is the point of this module: building the parser imports only this module and
``argparse``. A command's handler module (which imports the application, rich, the providers...)
is imported only once that command has been chosen, by ``Command.handler()``.

Adding a command is one row in ``COMMANDS`` plus its handler module:

    Command("forget", "coder_es.cli.forget:cmd_forget", "forget a session", _forget_args),

where ``_forget_args(p)`` (in this module, importing nothing heavy) declares its arguments and
``cmd_forget(args, ctx) -> int`` returns the exit code. ``needs_store=True`` says the command
works on what is already recorded, so it never creates a store: run where there is none,
``ctx.app`` says so instead of creating one (only commands that record new sessions create it).
Options common to every command go in ``add_global_options`` (accepted before and after the
command name).
The hostile-argument test (tests/core/test_cli_hostile.py) runs every row automatically.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Handler = Callable[[argparse.Namespace, Any], int]

# The values below are also defined where they are used (a test checks they agree); importing
# those modules here would cost the start-up time this table exists to save.
EXPORT_FORMATS = ("jsonl", "otel", "md", "html")
REPLAY_MODES = ("verify", "live")
CASSETTE_SUFFIX = ".cassette.jsonl"
DEFAULT_BUDGET = 100_000
DEFAULT_QUEUE = "sessions"
DEMO_CASSETTE = "branched-rewind"
DEMO_DIR = "coder-es-demo"
BACKEND_CHOICES = ("lmdb", "sqlite", "postgres", "popo")
AGENTS = ("build", "plan", "explore")
PROVIDERS = ("anthropic", "openai", "openai-responses", "ollama", "scripted")
SEARCH_KINDS = ("user", "assistant", "tool", "file")


@dataclass(frozen=True)
class Command:
    name: str
    target: str
    """``module:function`` of the handler."""
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    needs_store: bool = False
    """The command works on recorded sessions: it never creates a store (``NoStoreError``)."""
    reports_bad_config: bool = False
    """The command runs with the defaults when the configuration has problems, and reports
    them itself (``ctx.config_error``)."""
    reads_only: bool = False
    """The command only reads what is recorded: with a broken configuration it runs with the
    defaults and a warning (it runs no tool, so no rule of the broken file is missed)."""
    aliases: tuple[str, ...] = ()
    description: str | None = None
    epilog: str | None = None

    def handler(self) -> Handler:
        module, _, function = self.target.partition(":")
        handler: Handler = getattr(importlib.import_module(module), function)
        return handler


# ---------------------------------------------------------------------- global options


def add_global_options(parser: argparse.ArgumentParser, *, after_command: bool = False) -> None:
    """``--workspace``, ``--store`` and ``--backend``: accepted before the command and after it
    (``coder-es worker --backend postgres``). After it they default to "not given", so that they
    never overwrite a value given before the command."""

    def default(value: Any) -> Any:
        return argparse.SUPPRESS if after_command else value

    parser.add_argument(
        "--workspace",
        default=default(None),
        help="the project directory (default: the directory holding the nearest .coder-es/ "
        "above the current one, else the current directory)",
    )
    parser.add_argument(
        "--store",
        default=default(None),
        help="store directory (default: $CODER_ES_STORE or WORKSPACE/.coder-es)",
    )
    parser.add_argument(
        "--backend",
        choices=BACKEND_CHOICES,
        default=default(None),
        help="event store backend (default: $CODER_ES_BACKEND or lmdb)",
    )


# ---------------------------------------------------------------------- arguments


def _json(p: argparse.ArgumentParser, text: str = "machine-readable output") -> None:
    p.add_argument("--json", action="store_true", help=text)


def _session(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", help="session id or unique prefix")


def _node(p: argparse.ArgumentParser, name: str = "node") -> None:
    p.add_argument(name, help="node id, unique prefix, label or HEAD")


def _sessions_args(p: argparse.ArgumentParser) -> None:
    _json(p)
    p.add_argument(
        "--tree",
        action="store_true",
        help="each session under the one it was forked from (subagents under their parent)",
    )
    hidden = p.add_mutually_exclusive_group()
    hidden.add_argument(
        "--deleted",
        action="store_true",
        help="list the deleted sessions instead (deleting hides a session; nothing is removed)",
    )
    hidden.add_argument(
        "--delete", metavar="SESSION", help="hide SESSION from the lists (its record stays)"
    )
    hidden.add_argument("--restore", metavar="SESSION", help="list a deleted SESSION again")


def _show_args(p: argparse.ArgumentParser) -> None:
    _session(p)
    p.add_argument(
        "node", nargs="?", help="node id, prefix, label or HEAD: that node printed whole"
    )
    p.add_argument("path", nargs="?", help="the file to print as it was at NODE")
    p.add_argument(
        "--proposed",
        action="store_true",
        help="the agent's version that a conflict at NODE left unapplied (take it: > PATH)",
    )
    _json(p, "the node's event; with PATH the file, its author (session or user) and origin")


def _doctor_args(p: argparse.ArgumentParser) -> None:
    _json(p)


def _provider_args(p: argparse.ArgumentParser, model_help: str) -> None:
    p.add_argument("--provider", help=", ".join(PROVIDERS[:-1]) + " or " + PROVIDERS[-1])
    p.add_argument("--model", help=model_help)
    p.add_argument(
        "--script",
        help="script file for the scripted provider (or a bundled example's name: fix_add)",
    )
    p.add_argument("--agent", choices=AGENTS, help="agent preset (default build)")


RULES_HELP = """\
permission rules (--allow / --deny RULE):
  RULE is TOOL or TOOL:PATTERN; TOOL is bash, read, write, edit, grep, find or *.
  bash patterns match each simple command the line runs, found with a shell parser
  (pipes, lists, subshells, $(..), <(..), if/for/while/case, function bodies, and what
  env, sudo, nice, timeout, xargs, exec, command, sh -c '..', eval '..', find -exec
  run; /bin/rm counts as rm; find -delete counts as rm). 'git *' also matches plain
  'git'. A deny matching any command denies; an allow must match every one; a command
  with an unknown argument ($X, $(..)) is never allowed by a pattern; one the parser
  cannot see ($X as the name, eval "$x", a pipe into sh, unparseable) asks.
  Variables a line gives its programs (X=1 cmd, env X=1, export X, env -i) keep it
  allowable only when on the allow-list LANG LANGUAGE LC_* TZ NO_COLOR FORCE_COLOR
  CLICOLOR CLICOLOR_FORCE COLORTERM TERM COLUMNS LINES CI (formatting only); any other
  (GIT_*, LD_PRELOAD, PATH, HOME, PAGER...) makes the line's commands unmatchable by
  allow patterns, and asks while a deny rule names commands.
  Files a command line writes (>, >>, &>, tee F, dd of=F) are checked as 'write' of
  them, and paths outside the workspace it may name as 'read': 'cat /etc/shadow',
  ~+/.., ~-, ~user, '-- -/../x', -f../x, --opt=../x, brace and glob expansions.
  File patterns match workspace-relative paths: * and ? stay in one directory, **
  spans directories ('secrets/**'); paths outside the workspace need an absolute
  pattern ('read:/etc/**').
  Order, for each command, write and outside path of a call (the strictest wins):
  your deny rules and 'always deny' answers; a variable off the allow-list asks
  while a deny rule names commands; a hidden command asks; writes to .git/hooks/**,
  .git/config and .git (git config, cp/mv/ln into them...) ask; repeated identical
  calls ask; 'always allow' answers; your rules (last match wins); outside paths ask;
  the agent preset (build: all allowed; plan: reads + safe commands, git's read-only
  subcommands with listed options, other commands ask, no writes; explore: reads
  only); otherwise ask.
  run cannot ask: without --yes an ask is rejected (reason recorded); --yes allows once;
  a bare --defer parks it: the run exits 3 and `coder-es approve`/`deny` answers it.
  --schedule 'TOOL[:PATTERN]@HH:MM-HH:MM' runs such calls only in that window (UTC):
  outside it the turn parks (exit 3) until a resume after the window opens.
"""


def _turn_args(p: argparse.ArgumentParser) -> None:
    """``chat``'s options; ``run`` adds its PROMPT."""
    p.add_argument("--session", help="resume this session (id or unique prefix)")
    p.add_argument(
        "--harness",
        metavar="NAME",
        help="run another agent as this session: claude, codex, gemini, acp:'CMD ARGS' or a "
        "[harnesses.NAME] of the configuration (docs/harness.md)",
    )
    _provider_args(p, "model name (scripted: the script path)")
    p.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="RULE",
        help="allow TOOL or TOOL:PATTERN (repeatable), e.g. 'bash:git *'",
    )
    p.add_argument(
        "--deny",
        action="append",
        default=[],
        metavar="RULE",
        help="deny TOOL or TOOL:PATTERN (repeatable), e.g. 'edit:secrets/**'",
    )
    p.add_argument(
        "--defer",
        action="append",
        default=[],
        nargs="?",
        const=None,
        metavar="RULE",
        help="park TOOL or TOOL:PATTERN calls until `coder-es approve`/`deny` answers them "
        "(repeatable); a bare --defer (after the PROMPT) parks every question instead of "
        "rejecting it; the run then exits 3",
    )
    p.add_argument(
        "--schedule",
        action="append",
        default=[],
        metavar="RULE@HH:MM-HH:MM",
        help="run TOOL[:PATTERN] calls only in that window (UTC), e.g. "
        "'bash:make deploy*@22:00-06:00'; outside it the turn parks (exit 3) until "
        "`run --session S` or a worker takes it up after the window opens",
    )
    p.add_argument(
        "--yes", action="store_true", help="answer every permission question with allow once"
    )
    p.add_argument("--max-steps", type=int, default=50, help="model calls per turn (default 50)")
    p.add_argument("--title", default="", help="a title for a new session")
    _json(p, "one JSON update per line")


def _run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "prompt",
        nargs="?",
        help="the message (omit with --session to continue an interrupted turn)",
    )
    p.add_argument(
        "--image",
        action="append",
        default=[],
        metavar="PATH",
        help="attach a PNG, JPEG, GIF or WebP image to the message (repeatable)",
    )
    _turn_args(p)


def _pending_args(p: argparse.ArgumentParser) -> None:
    _json(p, "one JSON object per waiting question")


def _answer_args(p: argparse.ArgumentParser) -> None:
    _session(p)
    p.add_argument("calls", nargs="*", metavar="CALL", help="tool call ids (default: all)")


def _approve_args(p: argparse.ArgumentParser) -> None:
    _answer_args(p)
    p.add_argument(
        "--always",
        action="store_true",
        help="allow such calls for the rest of the session (the suggested pattern)",
    )
    p.add_argument(
        "--continue",
        dest="continue_turn",
        action="store_true",
        help="continue the turn now, in this process (else: coder-es run --session S)",
    )
    _provider_args(p, "model name (scripted: the script path), for --continue")
    p.add_argument("--max-steps", type=int, default=50, help="model calls, with --continue")


def _deny_args(p: argparse.ArgumentParser) -> None:
    _answer_args(p)
    p.add_argument("--message", default=None, help="why: the model reads it as the result")


def _tree_args(p: argparse.ArgumentParser) -> None:
    _session(p)
    _json(p)


def _diff_args(p: argparse.ArgumentParser) -> None:
    _session(p)
    _node(p, "node_a")
    _node(p, "node_b")
    form = p.add_mutually_exclusive_group()
    form.add_argument("--stat", action="store_true", help="lines added and removed per file")
    form.add_argument("--name-only", action="store_true", help="only the paths that differ")
    form.add_argument("--json", action="store_true", help="machine-readable output")


def _fork_args(p: argparse.ArgumentParser) -> None:
    _session(p)
    p.add_argument("node", nargs="?", default=None, help="node to continue from (default: head)")
    p.add_argument("--new-session", action="store_true", help="start a new session from that node")
    _json(p)


def _checkout_args(p: argparse.ArgumentParser) -> None:
    _session(p)
    _node(p)
    _json(p)


def _rewind_args(p: argparse.ArgumentParser) -> None:
    _session(p)
    _node(p)
    only = p.add_mutually_exclusive_group()
    only.add_argument("--conversation", action="store_true", help="move the head only")
    only.add_argument("--files", action="store_true", help="restore the files only")
    _json(p)


def _label_args(p: argparse.ArgumentParser) -> None:
    _session(p)
    _node(p)
    p.add_argument("name", help="the label")
    _json(p)


def _export_args(p: argparse.ArgumentParser) -> None:
    _session(p)
    p.add_argument(
        "--format",
        choices=EXPORT_FORMATS,
        help="default: from the suffix of --output (.jsonl, .md, .html; .json for otel)",
    )
    p.add_argument("-o", "--output", help="write to FILE (default: standard output)")
    p.add_argument(
        "--push",
        action="store_true",
        help="otel only: send the spans to the configured OTLP endpoint instead of printing",
    )
    p.add_argument("--since", help="only events at or after this ISO time")
    p.add_argument("--until", help="only events at or before this ISO time")
    p.add_argument("--kinds", help="only these event kinds, comma-separated")
    p.add_argument("--branch", metavar="NODE", help="only the path from the root to NODE")
    p.add_argument(
        "--redact-glob",
        action="append",
        default=[],
        metavar="GLOB",
        help="replace the contents of files matching GLOB (repeatable)",
    )
    p.add_argument(
        "--no-children",
        action="store_true",
        help="leave out the subagents' sessions (by default the export holds them)",
    )


def _verify_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", nargs="?", help="session id or prefix, or an exported JSONL file")
    p.add_argument("--all", action="store_true", help="every session and blob in the store")
    _json(p, "machine-readable report")


def _record_args(p: argparse.ArgumentParser) -> None:
    _session(p)
    p.add_argument("-o", "--output", required=True, help=f"the cassette file (*{CASSETTE_SUFFIX})")
    p.add_argument(
        "--touched-only",
        action="store_true",
        help="include only the files the session touched, not the rest of the workspace",
    )
    p.add_argument(
        "--max-steps", type=int, default=None, help="the step limit the session ran with"
    )


def _replay_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("cassettes", nargs="+", metavar="CASSETTE", help="cassette files or folders")
    p.add_argument(
        "--mode", choices=REPLAY_MODES, default="verify", help="verify (default) or live"
    )
    _json(p, "one JSON report per cassette per line")
    p.add_argument(
        "--keep-workspace", action="store_true", help="keep the scratch workspace of each replay"
    )
    p.add_argument(
        "--repo",
        action="append",
        default=[],
        metavar="PATH",
        help="live mode: a git repository holding the commit the session started at "
        "(default: the recorded repository, then the workspace)",
    )


def _demo_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--cassette", default=DEMO_CASSETTE, help=f"bundled cassette name (default {DEMO_CASSETTE})"
    )
    p.add_argument(
        "--dir", default=DEMO_DIR, help=f"where the demo workspaces go (default ./{DEMO_DIR})"
    )
    p.add_argument("--list", action="store_true", help="list the bundled cassettes")


def _client_args(p: argparse.ArgumentParser) -> None:
    _provider_args(p, "model name")
    p.add_argument(
        "--no-watch", action="store_true", help="do not reload the configuration on change"
    )


def _acp_args(p: argparse.ArgumentParser) -> None:
    _client_args(p)
    p.add_argument(
        "--harness",
        default=None,
        help="sessions run by another agent: claude, codex, gemini, acp:'CMD ARGS' or a "
        "[harnesses.NAME] of the configuration (coder-es is the ACP bridge in front of it)",
    )


def _serve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default=None, help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="port (default 8765; 0 picks one)")
    _client_args(p)


def _worker_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--concurrency", type=int, default=4, help="sessions run at once (default 4)")
    p.add_argument("--queue", default=DEFAULT_QUEUE, help=f"queue name (default {DEFAULT_QUEUE})")
    p.add_argument("--name", default=None, help="worker name shown in logs")
    p.add_argument("--heartbeat", type=float, default=2.0, help="seconds between heartbeats")
    p.add_argument(
        "--stall-timeout",
        type=float,
        default=15.0,
        help="seconds without heartbeat before a worker's jobs are requeued (default 15)",
    )
    p.add_argument("--until-empty", action="store_true", help="exit when no job is left to start")
    p.add_argument("-v", "--verbose", action="store_true", help="log the queue's own activity")


def _enqueue_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("prompt", nargs="?", help="the message (omit with --session to resume)")
    p.add_argument("--session", help="an existing session (id or unique prefix)")
    _provider_args(p, "model name (scripted: the script path)")
    p.add_argument("--allow", action="append", default=[], metavar="RULE")
    p.add_argument("--deny", action="append", default=[], metavar="RULE")
    p.add_argument(
        "--defer",
        action="append",
        default=[],
        nargs="?",
        const=None,
        metavar="RULE",
        help="park TOOL or TOOL:PATTERN calls (repeatable); a bare --defer parks every question "
        "instead of rejecting it. An answer (coder-es approve/deny) queues the session again",
    )
    p.add_argument(
        "--schedule",
        action="append",
        default=[],
        metavar="RULE@HH:MM-HH:MM",
        help="run TOOL[:PATTERN] calls only in that window (UTC); the session is queued again "
        "for the window's opening",
    )
    p.add_argument("--yes", action="store_true", help="workers allow asked calls once")
    p.add_argument("--max-steps", type=int, default=50)
    p.add_argument("--title", default="")
    p.add_argument("--queue", default=DEFAULT_QUEUE)
    _json(p)


def _project_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--view",
        choices=("summary", "search"),
        default="summary",
        help="the view kept: the sessions summary (default) or the search index",
    )
    p.add_argument(
        "--until-caught-up", action="store_true", help="stop once every event so far is processed"
    )
    p.add_argument("--check", action="store_true", help="compare the view with a rebuild")
    _json(p)


def _search_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("query", nargs="+", help='words and "quoted phrases"; all must occur')
    p.add_argument("--session", help="only this session (id or unique prefix)")
    p.add_argument("--kind", choices=SEARCH_KINDS, help="only this kind of text")
    p.add_argument("--since", metavar="DATE", help="only text recorded since DATE (ISO 8601)")
    p.add_argument("--limit", type=int, default=20, help="at most N hits (default 20)")
    _json(p, "one JSON object per hit")


def _deps_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", nargs="?", default=None, help="directory (default: the workspace)")
    _json(p, "nodes and edges as JSON")


def _trust_args(p: argparse.ArgumentParser) -> None:
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--show", action="store_true", help="show whether it is trusted and what trust grants"
    )
    mode.add_argument("--revoke", action="store_true", help="forget the trust")


def _forget_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", nargs="?", help="session id or unique prefix")
    p.add_argument(
        "-y", "--yes", action="store_true", help="do not ask for confirmation on a terminal"
    )
    p.add_argument("--all", action="store_true", help="every session in the store")
    p.add_argument(
        "--older-than", type=int, metavar="DAYS", help="sessions started more than DAYS days ago"
    )
    p.add_argument(
        "--expired", action="store_true", help="sessions older than redaction.forget_after_days"
    )
    _json(p, "machine-readable result")


def _context_args(p: argparse.ArgumentParser) -> None:
    _session(p)
    p.add_argument(
        "--budget", type=int, default=DEFAULT_BUDGET, help=f"tokens (default {DEFAULT_BUDGET})"
    )
    _json(p, "parts, nodes and the request as JSON")


def _mcp_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "mcp_action",
        choices=("list", "test"),
        metavar="list|test",
        help="list: every configured server, its status and tools; test NAME: one server",
    )
    p.add_argument("name", nargs="?", help="test: the server's name in [mcp_servers]")
    _json(p)


HOOK_EVENTS = (
    "SessionStart", "UserPromptSubmit", "PreToolUse", "PermissionRequest", "PostToolUse",
    "PostToolUseFailure", "Stop", "SubagentStop", "PreCompact", "SessionEnd", "Notification",
)  # fmt: skip


def _hooks_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "hooks_action",
        choices=("import", "list", "test"),
        metavar="import|list|test",
        help="import: Claude Code's hooks into the config; list: what runs; test EVENT: run them",
    )
    p.add_argument("event", nargs="?", choices=HOOK_EVENTS, metavar="EVENT", help="test: the event")
    p.add_argument("--input", metavar="FILE", help="test: the hook input (JSON; - for stdin)")
    p.add_argument("--from", dest="source", metavar="FILE", help="import: this settings file")
    _json(p)


# ---------------------------------------------------------------------- the table

_RUN = "run one agent turn non-interactively"
_TRUST_HELP = "let this workspace's .coder-es/config.toml apply, not only tighten"
_TRUST_DESCRIPTION = """\
A project's .coder-es/config.toml comes with the repository; until you trust it, it may only
tighten (deny and ask rules, a stricter default, a stricter agent preset or sandbox) and every
other setting (store, providers and base URLs, models, MCP servers, redaction, serve, telemetry,
...) does not apply; run and doctor name each one and why. `coder-es trust` records the file's
sha256 in your user config directory (like `direnv allow`): editing the file needs trusting
again."""
_CHAT = "talk with the agent interactively"
_MCP_DESCRIPTION = """\
`coder-es mcp list` starts every enabled server of [mcp_servers], lists its tools as the model
sees them (mcp__SERVER__TOOL, with what their annotations say they do) and stops it again.
`coder-es mcp test NAME` does the same for one server, even a disabled one, and exits 1 when it
does not start, showing the end of its stderr."""

_HOOKS_DESCRIPTION = """\
`coder-es hooks import` reads the hooks of ~/.claude/settings.json (into your user config) and of
.claude/settings.json (into the project config, applied once trusted). `coder-es hooks list`
shows what runs, in order. `coder-es hooks test EVENT [--input FILE]` runs that event's hooks on
sample input in the read-only sandbox and shows what each answered; exit 1 when they deny or
block."""

# In the order --help lists them.
COMMANDS: tuple[Command, ...] = (
    Command("sessions", "coder_es.cli.sessions:cmd_sessions", "list the sessions in the store",
            _sessions_args, needs_store=True, reads_only=True),
    Command("show", "coder_es.cli.sessions:cmd_show",
            "show the events of a session, or a file as it was at a node (NODE PATH)",
            _show_args, needs_store=True, reads_only=True),
    Command("doctor", "coder_es.cli.sessions:cmd_doctor",
            "which backend, where, and whether it is healthy", _doctor_args, needs_store=True,
            reports_bad_config=True),
    Command("pending", "coder_es.cli.waiting:cmd_pending",
            "list the questions parked turns wait for (every session of the store)",
            _pending_args, needs_store=True, reads_only=True),
    Command("approve", "coder_es.cli.waiting:cmd_approve",
            "allow parked calls of a session (all, or the CALLs named)", _approve_args,
            needs_store=True),
    Command("deny", "coder_es.cli.waiting:cmd_deny",
            "refuse parked calls of a session; the model gets the message", _deny_args,
            needs_store=True),
    Command("run", "coder_es.cli.harness_cmd:cmd_run", _RUN, _run_args, description=_RUN,
            epilog=RULES_HELP),
    Command("chat", "coder_es.cli.harness_cmd:cmd_chat", _CHAT, _turn_args, description=_CHAT,
            epilog=RULES_HELP),
    Command("tree", "coder_es.cli.tree:cmd_tree",
            "the conversation tree: branches, labels, file changes", _tree_args, needs_store=True,
            reads_only=True),
    Command("diff", "coder_es.cli.tree:cmd_diff",
            "compare two nodes: turns and unified diffs of files", _diff_args, needs_store=True,
            reads_only=True),
    Command("fork", "coder_es.cli.tree:cmd_fork",
            "continue from a node: a new branch or a new session", _fork_args, needs_store=True),
    Command("checkout", "coder_es.cli.tree:cmd_checkout",
            "move the head to a node and restore its files", _checkout_args, needs_store=True,
            aliases=("switch",)),
    Command("rewind", "coder_es.cli.tree:cmd_rewind",
            "go back along the current branch (conversation and/or files)", _rewind_args,
            needs_store=True),
    Command("label", "coder_es.cli.tree:cmd_label", "name a node", _label_args,
            needs_store=True),
    Command("export", "coder_es.cli.audit:cmd_export",
            "export a session as JSONL, OpenTelemetry (OTLP/JSON), Markdown or HTML",
            _export_args, needs_store=True, reads_only=True),
    Command("verify", "coder_es.cli.audit:cmd_verify",
            "check the hash chains of a session, of the whole store, or of an export",
            _verify_args, needs_store=True, reads_only=True),
    Command("record-cassette", "coder_es.cli.replay_cmds:cmd_record",
            "export a session as a replay cassette", _record_args, needs_store=True),
    Command("replay", "coder_es.cli.replay_cmds:cmd_replay",
            "replay cassettes with the current code", _replay_args, needs_store=True),
    Command("demo", "coder_es.cli.replay_cmds:cmd_demo",
            "replay a bundled session live, then show its tree (no API key needed)", _demo_args),
    Command("acp", "coder_es.cli.clients:cmd_acp",
            "speak the Agent Client Protocol on stdio (editors)", _acp_args),
    Command("serve", "coder_es.cli.clients:cmd_serve",
            "serve sessions over WebSocket (see docs/clients.md)", _serve_args),
    Command("worker", "coder_es.cli.fleet:cmd_worker",
            "take sessions from the PostgreSQL queue and run them", _worker_args),
    Command("enqueue", "coder_es.cli.fleet:cmd_enqueue",
            "queue a session (new or existing) for the workers", _enqueue_args),
    Command("project", "coder_es.cli.fleet:cmd_project",
            "run a projection process (sessions summary, search)", _project_args),
    Command("deps", "coder_es.cli.context_cmds:cmd_deps", "the dependency graph of a workspace",
            _deps_args, needs_store=True),
    Command("context", "coder_es.cli.context_cmds:cmd_context",
            "what the next model request of a session holds", _context_args, needs_store=True,
            reads_only=True),
    Command("forget", "coder_es.cli.secrets:cmd_forget",
            "destroy the sealed secrets of a session (the log stays verifiable)", _forget_args,
            needs_store=True),
    Command("trust", "coder_es.cli.trust_cmd:cmd_trust", _TRUST_HELP, _trust_args,
            description=_TRUST_DESCRIPTION),
    Command("mcp", "coder_es.cli.mcp_cmd:cmd_mcp", "list and test the configured MCP servers",
            _mcp_args, description=_MCP_DESCRIPTION),
    Command("hooks", "coder_es.cli.hooks_cmd:cmd_hooks",
            "import Claude Code's hooks, list the configured hooks, test an event's hooks",
            _hooks_args, description=_HOOKS_DESCRIPTION),
    Command("search", "coder_es.cli.search_cmd:cmd_search",
            "find text across every session in the store", _search_args, needs_store=True,
            reads_only=True),
)  # fmt: skip


def command_named(name: str) -> Command:
    for command in COMMANDS:
        if name == command.name or name in command.aliases:
            return command
    raise KeyError(name)
