"""``coder-es run`` (one non-interactive turn) and ``coder-es chat`` (interactive).

Permission rules on the command line: ``--allow RULE`` / ``--deny RULE`` where RULE is ``TOOL``
or ``TOOL:PATTERN`` (``--allow 'bash:git *'``, ``--deny 'edit:secrets/**'``); see
``coder_es.permissions.rules`` for the pattern syntax and ``coder_es.permissions.policy`` for the
order rules are evaluated in. ``run`` cannot ask anyone: without ``--yes`` a call that needs
permission is rejected (the reason is recorded and shown to the model); with ``--yes`` it is
allowed once. Deny rules deny either way.

Provider choice: ``--script`` (the scripted provider), else ``--provider`` (anthropic, openai,
ollama, scripted), else ``CODER_ES_PROVIDER``, else ``provider`` in the user's or a trusted
project's config, else the first of anthropic / openai whose API key is set, else scripted when
``CODER_ES_SCRIPT`` names a script. The model: ``--model``, else ``CODER_ES_MODEL``, else
``model`` in the config, else a default per provider (a resumed session keeps its own).

Exit codes: 0 the turn ended normally, 1 it ended on an error or the step limit, or a change
of the agent's (an edit or a command's) conflicted with the user's, 2 bad usage (including no
usable provider), 3 the turn is waiting for answers to parked questions (``--defer``; answer
with ``coder-es approve`` / ``deny``, then ``coder-es run --session S``), 130 cancelled
(Ctrl-C).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import sys
from collections.abc import AsyncIterator

from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

from coder_es.agent import updates as up
from coder_es.cli.context import Context, configured_agent, print_json
from coder_es.cli.interrupt import sigint_cancels
from coder_es.cli.progress import shown
from coder_es.config import Config
from coder_es.errors import UsageError
from coder_es.permissions.policy import UNTRUSTED_SOURCE
from coder_es.permissions.rules import Rule, configured_rule, parse_rule
from coder_es.permissions.subagents import agent_definitions
from coder_es.providers.catalogue import notice
from coder_es.providers.factory import SCRIPT_ENV
from coder_es.providers.images import read_image_file
from coder_es.providers.script_file import resolve_script
from coder_es.sandbox import SandboxSettings
from coder_es.service.api import (
    AgentService,
    SessionHandle,
    SessionOptions,
    auto_answerer,
    configured_provider_factory,
)

DEFAULT_MODELS = {
    "anthropic": "claude-sonnet-4-5",
    "openai": "gpt-4o",
    "openai-responses": "gpt-5",
    "ollama": "llama3.1",
}

NO_PROVIDER = (
    "no model provider is configured. Set one of: ANTHROPIC_API_KEY (provider anthropic), "
    "OPENAI_API_KEY or OPENAI_BASE_URL (provider openai), OLLAMA_HOST with --provider ollama. "
    "To run offline without any API key, use the scripted provider: "
    "--provider scripted --script turns.json (or set CODER_ES_SCRIPT=turns.json); "
    "bundled examples: --script fix_add (coder_es/data/scripts/)."
)


# ---------------------------------------------------------------------- options


def _rules(args: argparse.Namespace, ctx: Context) -> tuple[Rule, ...]:
    # Rules from config files come first: among user rules the last match wins, so the
    # command line overrides the project file, which overrides the user file.
    rules = [
        configured_rule(
            r.tool, r.pattern or None, r.action, "config" if r.trusted else UNTRUSTED_SOURCE
        )
        for r in ctx.settings.permissions.rules
        if r.source not in ("--allow", "--deny")
    ]
    rules += [parse_rule(r, "allow") for r in args.allow]
    rules += [parse_rule(r, "deny") for r in args.deny]
    rules += [parse_rule(r, "defer") for r in getattr(args, "defer", []) if r is not None]
    rules += [parse_rule(r, "schedule") for r in getattr(args, "schedule", [])]
    return tuple(rules)


def _provider(
    args: argparse.Namespace, settings: Config, resuming: bool
) -> tuple[str | None, str | None]:
    """The provider and model (for ``scripted``: the script): ``--script`` first, then what the
    layered settings say (flags, ``CODER_ES_PROVIDER`` / ``CODER_ES_MODEL``, the user's and a
    trusted project's config files), then the first provider whose API key is set."""
    script = str(resolve_script(args.script)) if args.script is not None else None
    name = settings.provider if settings.origin("provider") is not None else None
    model = settings.model if settings.origin("model") is not None else None
    if name is None and script is not None:
        name = "scripted"
    if name == "scripted":
        script = script or (model if model and model.endswith((".json", ".jsonl")) else None)
        script = script or os.environ.get(SCRIPT_ENV) or None
        if script is None and not resuming:
            raise UsageError(
                "the scripted provider needs --script FILE (or CODER_ES_SCRIPT, or model = "
                '"FILE.json" in the config)'
            )
        return name, str(resolve_script(script)) if script is not None else None
    if name is None and not resuming:
        if os.environ.get("ANTHROPIC_API_KEY"):
            name = "anthropic"
        elif os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"):
            name = "openai"
        elif os.environ.get(SCRIPT_ENV):
            name = "scripted"
            return name, os.environ[SCRIPT_ENV]
        else:
            raise UsageError(NO_PROVIDER)
    if model is None and not resuming:
        model = DEFAULT_MODELS.get(name or "")
    return name, model


def report_ignored(ctx: Context) -> None:
    """Say, on stderr, which settings of an untrusted project config do not apply, and why."""
    for line in ctx.settings.ignored_lines():
        print(f"coder-es: {line}", file=sys.stderr)


async def _open(args: argparse.Namespace, ctx: Context) -> SessionHandle:
    report_ignored(ctx)
    resuming = bool(args.session)
    provider, model = _provider(args, ctx.settings, resuming)
    options = SessionOptions(
        agent=configured_agent(ctx, ctx.app.get_session(args.session).agent if resuming else None),
        provider=provider,
        model=model,
        rules=_rules(args, ctx),
        # Only a default the configuration states overrides the one a resumed session recorded.
        default_permission=(
            ctx.settings.permissions.default
            if ctx.settings.origin("permissions.default") is not None
            else None
        ),
        max_steps=args.max_steps,
        title=args.title or (getattr(args, "prompt", None) or "")[:80],
        # ``chat``'s messages come later (the loop refuses them one by one).
        message_follows=bool(getattr(args, "prompt", None)),
    )
    if args.max_steps < 1:
        raise UsageError("--max-steps must be at least 1")
    sandbox = ctx.settings.sandbox
    models = ctx.settings.model_catalogue()
    # A script's "model" is a file name: only real models are looked up.
    if model and provider != "scripted":
        line = notice(model, models.info(model))
        if line:
            print(f"coder-es: {line}", file=sys.stderr)
    service = AgentService(
        ctx.app,
        ctx.workspace,
        models=models,
        agents=agent_definitions(ctx.settings.agents),
        sandbox=SandboxSettings.configured(
            sandbox.mode, sandbox.network, sandbox.read_only, sandbox.writable
        ),
        mcp_servers=ctx.settings.mcp_servers.values(),
        hooks=ctx.settings.hooks,
        provider_factory=configured_provider_factory(ctx.settings),
    )
    if resuming:
        return await service.open_session(args.session, options)
    return await service.create_session(options)


EXIT_WAITING = 3
"""The turn is parked: questions wait for ``coder-es approve`` / ``deny`` (not 0-2, nor a
code shells and ``timeout`` use: 124-127, 128+N)."""


def _exit_code(handle: SessionHandle) -> int:
    outcome = handle.outcome
    if outcome is None or outcome.reason == "cancelled":
        return 130
    if outcome.reason == "waiting":
        return EXIT_WAITING
    if outcome.reason in ("error", "max_steps", "blocked"):
        return 1
    return 0


# ---------------------------------------------------------------------- rendering


class Renderer:
    """Human-readable updates: the model's text on stdout, activity on stderr.

    Every text that comes from the model, a tool or a file goes through ``escape``: rich would
    otherwise take ``[stderr]`` or ``[bold]`` in it for markup and drop it from the screen.
    """

    def __init__(self, console: Console, err: Console, *, spinners: bool = False) -> None:
        self.out = console
        self.err = err
        self.in_text = False
        self.opened = False
        # While tools run (a long command, the first scan of a big workspace): a spinner each.
        self.running = RunningTools(err) if spinners else None

    def _break(self) -> None:
        if self.in_text:
            self.out.file.write("\n")
            self.out.file.flush()
            self.in_text = False

    def line(self, markup: str) -> None:
        """One line of activity on stderr, never glued to the model's streamed text."""
        self._break()
        self.err.print(markup, highlight=False, soft_wrap=True)

    def show(self, u: up.Update) -> None:
        if isinstance(u, up.TextDelta):
            self.out.file.write(u.text)
            self.out.file.flush()
            self.in_text = True
            return
        if isinstance(u, up.SessionOpened):
            if self.opened:
                return  # chat sends one message after another on the same session: say it once
            self.opened = True
            verb = "resumed" if u.resumed else "started"
            self.line(
                f"[dim]session {u.session_id} {verb} "
                f"({escape(u.agent)}, {escape(u.provider)}/{escape(u.model)})[/dim]",
            )
            return
        if isinstance(u, up.ToolStarted):
            arg = u.input.get("command") or u.input.get("path") or u.input.get("pattern") or ""
            self.line(f"[cyan]▶ {escape(u.name)}[/cyan] {escape(str(arg))}")
            if self.running is not None:
                self.running.start(u.tool_use_id, f"running {u.name}")
        elif isinstance(u, up.ToolCompleted):
            if self.running is not None:
                self.running.stop(u.tool_use_id)
            mark = "[red]✗[/red]" if u.is_error else "[green]✓[/green]"
            lines = u.output.strip().splitlines()
            first = lines[0] if lines else ""
            # A failed command's reason is usually on its first stderr line, after the marker.
            if u.is_error and first.strip() in ("[stderr]", "[stdout]") and len(lines) > 1:
                first = f"{first.strip()} {lines[1]}"
            self.line(f"  {mark} {escape(u.name)} [dim]{escape(first[:100])}[/dim]")
        elif isinstance(u, up.PermissionDecision) and (
            u.decision == "deny" or u.decided_by != "rule"
        ):
            color = "green" if u.decision == "allow" else "red"
            why = f": {u.reason}" if u.reason else ""
            # An MCP call's subject is its tool name: said once, not twice.
            subject = "" if u.subject == u.tool else f" {escape(u.subject)}"
            self.line(
                f"  [{color}]{u.decision}[/{color}] {escape(u.tool)}{subject} "
                f"[dim]({escape(f'{u.scope}, by {u.decided_by}{why}')})[/dim]",
            )
        elif isinstance(u, up.PermissionDeferred):
            subject = "" if u.subject == u.tool else f" {escape(u.subject)}"
            why = f": {u.reason}" if u.reason else ""
            self.line(
                f"  [yellow]waits[/yellow] {escape(u.tool)}{subject} [dim]({escape(u.tool_use_id)}"
                f", parked by {escape(u.source + why)})[/dim]"
            )
        elif isinstance(u, up.HookRan) and (u.effect or u.exit_code != 0):
            # A hook that did something (or failed) says so; a silent pass stays silent.
            effect = u.effect
            what = ", ".join(
                f"{k} {effect[k]}" if k in ("decision", "failed") else k
                for k in ("decision", "blocked", "updated_input", "context", "feedback", "failed")
                if effect.get(k)
            )
            code = "timed out" if u.exit_code is None else f"exit {u.exit_code}"
            self.line(
                f"  [magenta]hook[/magenta] {escape(u.event)} {escape(u.hook)} "
                f"[dim]({escape(code)}{escape(': ' + what if what else '')})[/dim]"
            )
        elif isinstance(u, up.Retry):
            self.line(
                f"[yellow]retrying (attempt {u.attempt}) in {u.delay_s:.1f}s: "
                f"{escape(u.reason)}[/yellow]",
            )
        elif isinstance(u, up.Error):
            self.line(f"[red]error ({escape(u.kind)}): {escape(u.message)}[/red]")
        elif isinstance(u, up.TurnCancelled):
            if self.running is not None:
                self.running.stop_all()
            said = u.reason if u.reason.startswith("cancelled") else f"cancelled: {u.reason}"
            self.line(f"[yellow]{escape(said)}[/yellow]")
        elif isinstance(u, up.TurnEnded):
            if self.running is not None:
                self.running.stop_all()
            self._break()
            if u.reason not in ("end_turn", "stop_sequence"):
                self.line(f"[dim]turn ended: {escape(u.reason)} after {u.steps} step(s)[/dim]")


class RunningTools:
    """A transient spinner with the elapsed time for each tool call that runs."""

    def __init__(self, err: Console) -> None:
        self.err = err
        self.progress: Progress | None = None
        self.tasks: dict[str, TaskID] = {}

    def start(self, tool_use_id: str, description: str) -> None:
        if self.progress is None:
            self.progress = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                TimeElapsedColumn(),
                console=self.err,
                transient=True,
            )
            self.progress.start()
        self.tasks[tool_use_id] = self.progress.add_task(escape(description), total=None)

    def stop(self, tool_use_id: str) -> None:
        task = self.tasks.pop(tool_use_id, None)
        if self.progress is None:
            return
        if task is not None:
            self.progress.remove_task(task)
        if not self.tasks:
            self.progress.stop()
            self.progress = None

    def stop_all(self) -> None:
        for tool_use_id in list(self.tasks):
            self.stop(tool_use_id)
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


# ---------------------------------------------------------------------- run


def cmd_run(args: argparse.Namespace, ctx: Context) -> int:
    if not args.prompt and not args.session:
        raise UsageError("run needs a PROMPT (or --session ID to continue an interrupted turn)")
    if args.image and not args.prompt:
        raise UsageError("--image goes with a PROMPT")
    images = [read_image_file(path) for path in args.image]  # a bad one: exit 2, no session
    return asyncio.run(_run(args, ctx, images))


def _conflict_hints(ctx: Context, handle: SessionHandle, after: int, err: Console) -> int:
    """After a turn: each edit or command change that conflicted with the user's, and how to
    take the agent's; returns how many (a conflict makes ``run`` exit 1)."""
    from coder_es.views.files import unapplied_edits

    found = unapplied_edits(ctx.app, handle.id, after=after)
    for edit in found:
        whose = "the command's" if edit.by == "command" else "the agent's"
        kept = "the command deleted it" if edit.proposed is None else f"{whose} is kept"
        err.print(
            f"[yellow]conflict[/yellow] {escape(edit.path)}: your version is left on disk; "
            f"{kept}. Take it: [bold]{escape(edit.take_command(str(handle.id)))}"
            "[/bold]",
            highlight=False,
            soft_wrap=True,  # a command to copy must not be broken across lines
        )
    return len(found)


def _turn_usage(ctx: Context, handle: SessionHandle, after: int, err: Console) -> None:
    """After a turn: the tokens it used and what they cost, its subagents' included."""
    from projections.usage import usage_of, usage_summary

    usage = usage_of(ctx.app, handle.loop.session.id, ctx.settings.price_table(), after=after)
    if usage.total:
        err.print(f"[dim]usage {escape(usage_summary(usage))}[/dim]", highlight=False)


def _version(ctx: Context, handle: SessionHandle) -> int:
    return int(ctx.app.get_session(handle.id).version)


async def _run(args: argparse.Namespace, ctx: Context, images: list[bytes]) -> int:
    handle = await _open(args, ctx)
    try:
        before = _version(ctx, handle)
        answerer = auto_answerer(args.yes, defer=None in getattr(args, "defer", []))
        handle.loop.client = "coder-es run"
        stream: AsyncIterator[up.Update] = (
            handle.send(args.prompt, images=images, answerer=answerer)
            if args.prompt
            else handle.resume(answerer=answerer)
        )
        renderer = Renderer(Console(), Console(stderr=True), spinners=shown(args.json))
        with sigint_cancels(handle.cancel):
            async for update in stream:
                if args.json:
                    print_json(update.to_dict())
                    sys.stdout.flush()
                else:
                    renderer.show(update)
        conflicts = 0
        if not args.json:
            conflicts = _conflict_hints(ctx, handle, before, renderer.err)
            _turn_usage(ctx, handle, before, renderer.err)
        else:
            from coder_es.views.files import unapplied_edits

            conflicts = len(unapplied_edits(ctx.app, handle.id, after=before))
        await handle.end("other")
        code = _exit_code(handle)
        if code == 130:
            # Interrupted: the turn is recorded and can go on; say how.
            script = f" --script {shlex.quote(args.script)}" if args.script else ""
            Console(stderr=True).print(
                f"resume: coder-es run --session {handle.id[:8]}{script}",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
        if code == EXIT_WAITING:
            from coder_es.cli.questions import how_to_answer

            how_to_answer(ctx, handle.id, Console(stderr=True))
        # A conflict is a problem the user must look at: exit 1, as for rewind (README).
        return 1 if code == 0 and conflicts else code
    finally:
        await handle.close()
