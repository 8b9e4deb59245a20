"""``run --harness`` / ``chat --harness``: another agent CLI run as a recorded coder-es session.

``run --session S`` on a harness session continues it through the harness (no ``--harness``
needed; one given must name the session's own). The renderer and ``--json`` form are those of
native runs. Exit codes: 0 the turn ended, 1 it ended on an error, 2 bad usage (a missing CLI,
another harness than the session's), 130 cancelled.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import importlib
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from coder_es.agent import updates as up
from coder_es.cli.context import Context, print_json
from coder_es.cli.interrupt import sigint_cancels
from coder_es.errors import UsageError
from coder_es.harness.runner import HarnessSession
from coder_es.harness.spec import parse_harness
from coder_es.sandbox import SandboxSettings

if TYPE_CHECKING:
    from rich.console import Console

    from coder_es.permissions.policy import PermissionAnswer


def cmd_run(args: argparse.Namespace, ctx: Context) -> int:
    """``coder-es run``: a harness turn, else a native one (``coder_es.cli.run``, imported only
    then: the native agent's modules are most of a native run's start-up)."""
    if is_harness_run(args, ctx):
        return harness_run(args, ctx)
    from coder_es.cli.run import cmd_run as native

    return native(args, ctx)


def cmd_chat(args: argparse.Namespace, ctx: Context) -> int:
    if is_harness_run(args, ctx):
        return harness_chat(args, ctx)
    from coder_es.cli.chat import cmd_chat as native

    return native(args, ctx)


class Renderer:
    """The harness's text on stdout, its tool calls and the turn's end on stderr (the lines of
    a native run's renderer, ``coder_es.cli.run.Renderer``).

    The consoles are made (and rich imported) when the first line is shown, which is after the
    harness's process has started (``HarnessSession.send``): not before it, nor with ``--json``.
    """

    def __init__(self) -> None:
        self.in_text = False

    @functools.cached_property
    def out(self) -> Console:
        from rich.console import Console

        return Console()

    @functools.cached_property
    def err(self) -> Console:
        from rich.console import Console

        return Console(stderr=True)

    def line(self, markup: str) -> None:
        if self.in_text:
            self.out.file.write("\n")
            self.out.file.flush()
            self.in_text = False
        self.err.print(markup, highlight=False, soft_wrap=True)

    def show(self, u: up.Update) -> None:
        from rich.markup import escape

        if isinstance(u, up.TextDelta):
            self.out.file.write(u.text)
            self.out.file.flush()
            self.in_text = True
        elif isinstance(u, up.SessionOpened):
            verb = "resumed" if u.resumed else "started"
            self.line(
                f"[dim]session {u.session_id} {verb} ({escape(u.agent)}, "
                f"{escape(u.provider)}/{escape(u.model)})[/dim]"
            )
        elif isinstance(u, up.ToolStarted):
            arg = u.input.get("command") or u.input.get("file_path") or u.input.get("path") or ""
            self.line(f"[cyan]▶ {escape(u.name)}[/cyan] {escape(str(arg)[:200])}")
        elif isinstance(u, up.ToolCompleted):
            mark = "[red]✗[/red]" if u.is_error else "[green]✓[/green]"
            first = (u.output.strip().splitlines() or [""])[0]
            self.line(f"  {mark} {escape(u.name)} [dim]{escape(first[:100])}[/dim]")
        elif isinstance(u, up.PermissionRequired):
            self.line(
                f"[bold yellow]permission[/bold yellow] {escape(u.tool)} "
                f"[bold]{escape(u.subject)}[/bold] [dim]({escape(u.reason)})[/dim]"
            )
        elif isinstance(u, up.PermissionDecision):
            color = "green" if u.decision == "allow" else "red"
            self.line(
                f"  [{color}]{u.decision}[/{color}] {escape(u.tool)} {escape(u.subject)} "
                f"[dim]({escape(f'by {u.decided_by}: {u.reason}')})[/dim]"
            )
        elif isinstance(u, up.Error):
            self.line(f"[red]error ({escape(u.kind)}): {escape(u.message)}[/red]")
        elif isinstance(u, up.TurnCancelled):
            self.line(f"[yellow]cancelled: {escape(u.reason)}[/yellow]")
        elif isinstance(u, up.TurnEnded):
            if self.in_text:
                self.out.file.write("\n")
                self.in_text = False
            if u.reason not in ("end_turn", "stop_sequence"):
                self.line(f"[dim]turn ended: {escape(u.reason)} after {u.steps} step(s)[/dim]")


def report_ignored(ctx: Context) -> None:
    """Say, on stderr, which settings of an untrusted project config do not apply, and why."""
    for line in ctx.settings.ignored_lines():
        print(f"coder-es: {line}", file=sys.stderr)


def is_harness_run(args: argparse.Namespace, ctx: Context) -> bool:
    """``--harness`` given, or ``--session`` naming a harness session."""
    if getattr(args, "harness", None):
        return True
    ref = getattr(args, "session", None)
    if not ref:
        return False
    try:
        session = ctx.app.get_session(ref)
    except Exception:  # a native run reports an unknown session itself
        return False
    return bool((session.settings or {}).get("harness"))


def _open(args: argparse.Namespace, ctx: Context) -> HarnessSession:
    report_ignored(ctx)
    configured = dict(ctx.settings.harnesses)
    spec = parse_harness(args.harness, configured) if args.harness else None
    for flag, given in (
        ("--provider", args.provider),
        ("--model", args.model),
        ("--script", args.script),
    ):
        if given:
            msg = f"{flag} does not apply to a harness session: the harness chooses its own model"
            raise UsageError(msg)
    kw: dict[str, Any] = {
        "yes": args.yes,
        "rules": _rules(args, ctx),
        "default_permission": ctx.settings.permissions.default,
        "network": ctx.settings.sandbox.network,
        "writable": SandboxSettings.configured(
            "auto", None, False, ctx.settings.sandbox.writable
        ).writable,
        "store_path": ctx.config.path.resolve(),
        # The hooks of the events a harness session offers run around its turns.
        "hooks": tuple(ctx.settings.hooks),
    }
    if args.agent:
        kw["agent"] = args.agent
    if args.session:
        return HarnessSession.open(ctx.app, ctx.workspace, args.session, spec, configured, **kw)
    assert spec is not None
    kw["title"] = args.title or (getattr(args, "prompt", None) or "")[:80]
    # The store is opened once the harness's process has started (``HarnessSession.store``).
    return HarnessSession.create(lambda: ctx.app, ctx.workspace, spec, **kw)


def _rules(args: argparse.Namespace, ctx: Context) -> tuple[Any, ...]:
    """The config's rules, then the command line's (the last match wins), as a native run has
    them (``coder_es.cli.run._rules``)."""
    from coder_es.permissions.policy import UNTRUSTED_SOURCE
    from coder_es.permissions.rules import configured_rule, parse_rule

    rules = [
        configured_rule(
            r.tool, r.pattern or None, r.action, "config" if r.trusted else UNTRUSTED_SOURCE
        )
        for r in ctx.settings.permissions.rules
        if r.source not in ("--allow", "--deny")
    ]
    rules += [parse_rule(r, "allow") for r in args.allow]
    rules += [parse_rule(r, "deny") for r in args.deny]
    return tuple(rules)


async def _turn(
    ctx: Context,
    session: HarnessSession,
    prompt: str,
    as_json: bool,
    renderer: Renderer,
    ask: Callable[[up.PermissionRequired], Awaitable[PermissionAnswer]] | None = None,
) -> int:
    # A `kill` (TERM) or a closed terminal (HUP) ends the turn as Ctrl-C does: what the harness
    # did is applied and the turn recorded as cancelled, not lost with the process.
    with sigint_cancels(session.cancel, also=(signal.SIGTERM, signal.SIGHUP)):
        async for update in session.send(prompt, ask=ask):
            if isinstance(update, up.SessionOpened):
                prepare_end_of_turn(ctx)
            if as_json:
                print_json(update.to_dict())
                sys.stdout.flush()
            else:
                renderer.show(update)
    outcome = session.outcome
    if outcome is None or outcome.reason == "cancelled":
        return 130
    return 1 if outcome.reason == "error" else 0


_END_OF_TURN_MODULES = ("coder_es.records",)
"""What the end of a turn imports to record it (the search index its save feeds is opened by
``Context.prepare_search_index``)."""
_warming: list[threading.Thread] = []


def prepare_end_of_turn(ctx: Context) -> None:
    """Import what the end of the turn needs, and open the search index its save feeds, while
    the harness starts up (it has started once the session is shown opened,
    ``HarnessSession.send``, and asks nothing of us for hundreds of milliseconds): its start is
    not delayed by them, nor its model requests (an import holds the interpreter's lock, which
    the proxy needs), nor its end by doing them then. Only preparation: the recording is the
    same."""
    ctx.prepare_search_index()
    if _warming:
        return

    def load() -> None:
        for name in _END_OF_TURN_MODULES:
            with contextlib.suppress(Exception):  # the end of the turn imports it again
                importlib.import_module(name)

    _warming.append(threading.Thread(target=load, name="coder-es-warm", daemon=True))
    _warming[0].start()


def _asker(
    renderer: Renderer,
) -> Callable[[up.PermissionRequired], Awaitable[PermissionAnswer]]:
    """Asks the chat's user what no rule settles, as a native chat does (``cli.chat``): a
    harness's permission question (ACP ``request_permission``, Claude Code's prompt tool)."""
    from coder_es.permissions.policy import PermissionAnswer

    async def ask(q: up.PermissionRequired) -> PermissionAnswer:
        # The question is an update too: its line is shown first (the turn's loop shows the
        # updates queued so far when this task yields).
        for _ in range(3):
            await asyncio.sleep(0)
        while True:
            renderer.err.file.write("  allow [o]nce, or [r]eject? ")
            renderer.err.file.flush()
            # A thread: the turn (the harness's stream, the proxy) goes on while the user reads.
            raw = await asyncio.to_thread(sys.stdin.readline)
            choice = raw.strip().lower()[:1] if raw else "r"
            if choice == "o":
                return PermissionAnswer.allow_once()
            if choice == "r":
                return PermissionAnswer.reject("rejected by the user")

    return ask


def harness_run(args: argparse.Namespace, ctx: Context) -> int:
    if not args.prompt:
        raise UsageError("run --harness needs a PROMPT")
    if args.image:
        raise UsageError("--image is not supported with a harness")
    session = _open(args, ctx)
    code = asyncio.run(_turn(ctx, session, args.prompt, args.json, Renderer()))
    # The turn is recorded and this process ends with the command (the store is closed after
    # this returns; nothing of it is left to a collector): the objects made so far are
    # frozen, so the cyclic collector's full passes at exit, over every module, class and
    # event of the run, are skipped (as for the read commands, ``coder_es.cli.main``). That
    # was ~50 ms of a harness turn's wall time (bench/harness.py).
    gc.freeze()
    return code


def harness_chat(args: argparse.Namespace, ctx: Context) -> int:
    """One turn per line read from the terminal (or stdin), until end of input or ``/exit``."""
    session = _open(args, ctx)
    renderer = Renderer()
    code = 0
    while True:
        try:
            line = input("> ")
        except EOFError:
            return code
        text = line.strip()
        if text in ("/exit", "/quit"):
            return code
        if not text:
            continue
        ask = None if args.yes else _asker(renderer)
        code = asyncio.run(_turn(ctx, session, text, args.json, renderer, ask))
