"""``coder-es chat``: an interactive session at a terminal.

Messages are typed with line editing, a history per workspace, multi-line input and completion
(``chat_input``); lines starting with ``/`` are commands of the product (``/help`` lists them:
the tree, rewind and undo, fork, checkout, diff, label, search, the model and agent, the cost),
never sent to the model. While the model has not answered yet a spinner shows the time waited.

Ctrl-C while a turn runs (streaming, running tools, or waiting at a permission question) cancels
that turn, which is recorded and resumable; the prompt comes back. Ctrl-C at the message prompt
says how to quit. Ctrl-D or ``/exit`` leave, saying how to resume the session.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from coder_es.agent import updates as up
from coder_es.cli.chat_input import (
    ChatInput,
    PlainInput,
    SlashAndPathCompleter,
    TerminalInput,
    history_file,
)
from coder_es.cli.context import Context, print_json
from coder_es.cli.progress import shown
from coder_es.cli.run import Renderer, _conflict_hints, _open, _version
from coder_es.errors import CoderESError, UsageError
from coder_es.permissions.policy import PermissionAnswer
from coder_es.providers.images import read_image_file
from coder_es.service.api import SessionHandle, auto_answerer
from coder_es.userdirs import user_data_dir

QUIT = ("/exit", "/quit")

# (command, arguments, what it does): the order /help lists them in.
SLASH_COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("/help", "", "this list"),
    ("/tree", "", "the session's tree: branches, labels, files changed, the head"),
    (
        "/rewind",
        "NODE",
        "move the head back to NODE and restore its files (--conversation, --files)",
    ),
    ("/undo", "", "rewind to before your last message (its answer and its file changes)"),
    ("/fork", "[NODE]", "a new branch from NODE (default: the head), in this session"),
    ("/checkout", "NODE", "go to NODE: its conversation and files"),
    ("/diff", "[A [B]]", "what changed between two nodes (default: your last turn)"),
    ("/label", "NODE NAME", "name a node"),
    ("/search", "TEXT", "search this session"),
    ("/model", "[MODEL]", "show or change the model"),
    ("/agent", "[build|plan|explore]", "show or change the agent preset"),
    ("/pending", "", "permission questions waiting for an answer"),
    ("/cost", "", "tokens used and what they cost"),
    ("/image", "PATH", "attach an image to your next message"),
    ("/exit", "", "leave (also /quit, Ctrl-D); the session can be resumed"),
)

# Updates that end the wait for the model (the spinner stops on them).
_ANSWERING = (
    up.TextDelta,
    up.ThinkingDelta,
    up.ModelResponse,
    up.ToolStarted,
    up.PermissionRequired,
    up.TurnEnded,
    up.TurnCancelled,
    up.Error,
)


class WaitingForModel:
    """A spinner with the time waited, from a request until the model's first token."""

    def __init__(self, err: Console, enabled: bool) -> None:
        self.err = err
        self.enabled = enabled
        self.progress: Progress | None = None

    def start(self) -> None:
        if not self.enabled or self.progress is not None:
            return
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("[dim]waiting for the model[/dim]"),
            TimeElapsedColumn(),
            console=self.err,
            transient=True,
        )
        self.progress.add_task("model", total=None)
        self.progress.start()

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


class Chat:
    """One interactive session on a terminal."""

    def __init__(
        self,
        args: argparse.Namespace,
        handle: SessionHandle,
        ctx: Context,
        reader: ChatInput | None,
    ) -> None:
        self.args = args
        self.handle = handle
        self.ctx = ctx
        self.as_json = args.json
        self.err = Console(stderr=True, highlight=False)
        self.renderer = Renderer(Console(), self.err, spinners=shown(args.json))
        self.waiting = WaitingForModel(self.err, shown(args.json))
        self.terminal = reader is not None
        self.input: ChatInput = reader or PlainInput(sys.stdin.fileno(), self._write_prompt)
        self.yes = args.yes
        self.answerer = auto_answerer(True) if args.yes else self.ask
        # Set when the question with this tool-use id has been shown: asking waits for it, so the
        # question comes after every update before it (the turn runs ahead of the screen).
        self._shown: dict[str, asyncio.Event] = {}
        self.at_prompt = False  # waiting at the message prompt
        self.prompting = False  # a plain prompt is on the screen, its line not typed yet
        self.images: list[bytes] = []  # attached with /image, sent with the next message
        self.commands: dict[str, Callable[[str], Awaitable[None]]] = {
            "/help": self.help,
            "/tree": self.tree,
            "/rewind": self.rewind,
            "/undo": self.undo,
            "/fork": self.fork,
            "/checkout": self.checkout,
            "/diff": self.diff,
            "/label": self.label,
            "/search": self.search,
            "/model": self.model,
            "/agent": self.agent,
            "/pending": self.pending,
            "/cost": self.cost,
            "/image": self.attach,
        }

    def _write_prompt(self, text: str) -> None:
        self.err.file.write(text)
        self.err.file.flush()
        self.prompting = True

    async def read(self, prompt: str, *, message: bool) -> str | None:
        try:
            return await self.input.read(prompt, message=message)
        finally:
            self.prompting = False

    def on_sigint(self) -> None:
        """Ctrl-C outside a terminal prompt (a turn running, or a plain prompt)."""
        if self.prompting:
            self.err.file.write("\n")  # the terminal echoed ^C after the prompt
            self.prompting = False
        if self.handle.cancel():
            return  # the turn stops (recorded); its updates end with the cancellation
        self.err.print("[dim](Ctrl-D or /exit to quit)[/dim]")
        if self.at_prompt:
            self._write_prompt("> ")

    async def run(self) -> int:
        self.err.print(
            f"[dim]session {self.handle.id}: type a message; /help lists the commands; "
            "/exit or Ctrl-D to quit; Ctrl-C cancels a turn[/dim]"
        )
        while True:
            self.at_prompt = True
            try:
                text = await self.read("> ", message=True)
            except KeyboardInterrupt:  # at a terminal prompt: raw mode, a key, not a signal
                self.err.print("[dim](Ctrl-D or /exit to quit)[/dim]")
                continue
            finally:
                self.at_prompt = False
            if text is None or text.strip() in QUIT:
                if text is None:
                    self.err.print()
                self.say_how_to_resume()
                return 0
            stripped = text.strip()
            if stripped.startswith("//"):
                await self.message(text.replace("//", "/", 1))  # a message that starts with "/"
            elif stripped.startswith("/"):
                await self.command(stripped)
            elif stripped:
                await self.message(text)

    def say_how_to_resume(self) -> None:
        self.err.print(
            f"[dim]resume this session: [bold]coder-es chat --session {self.handle.id[:8]}"
            "[/bold][/dim]",
            soft_wrap=True,
        )

    async def command(self, line: str) -> None:
        name, _, rest = line.partition(" ")
        handler = self.commands.get(name)
        if handler is None:
            self.err.print(
                f"[red]unknown command {escape(name)}[/red]: /help lists them "
                "(start a message with // to send a text that begins with /)"
            )
            return
        try:
            await handler(rest.strip())
        except CoderESError as e:  # a bad node, a busy session: one line, the chat goes on
            self.err.print(f"[red]{escape(str(e))}[/red]")

    # ------------------------------------------------------------------ slash commands

    async def help(self, _: str) -> None:
        for name, arguments, what in SLASH_COMMANDS:
            self.err.print(f"  [bold]{name}[/bold] {escape(arguments):<22} {escape(what)}")

    async def tree(self, _: str) -> None:
        from coder_es.clients.branch_ops import tree_text

        print(tree_text(self.ctx.app, self.ctx.workspace, self.handle.id))

    def _moved(self, result: Any) -> None:
        from coder_es.cli.tree import _report

        self.handle.reload()  # the next turn starts from the moved head
        _report(result, as_json=False)

    async def rewind(self, arguments: str) -> None:
        from coder_es.clients import branch_ops

        words = arguments.split()
        nodes = [w for w in words if not w.startswith("--")]
        if len(nodes) != 1:
            raise UsageError("/rewind NODE [--conversation|--files] (/tree shows the nodes)")
        result = branch_ops.rewind(
            self.ctx.app,
            self.ctx.workspace,
            self.handle.id,
            nodes[0],
            conversation="--files" not in words,
            files="--conversation" not in words,
        )
        self._moved(result)

    async def undo(self, _: str) -> None:
        from coder_es.branching import Branching
        from coder_es.clients import branch_ops

        tree = Branching(self.ctx.app, self.ctx.workspace).tree(self.handle.id)
        mine = [n for n in tree.path(tree.head_node) if tree.kind(n) == "user"]
        if not mine:
            raise UsageError("nothing to undo: no message has been sent yet")
        # Before the last message: its parent; the first message has none, so the head stays
        # on it (its answer and every change after it are undone).
        target = tree.parent_of(mine[-1]) or mine[-1]
        self._moved(branch_ops.rewind(self.ctx.app, self.ctx.workspace, self.handle.id, target))

    async def fork(self, arguments: str) -> None:
        from coder_es.clients import branch_ops

        node = arguments or None
        result = branch_ops.fork(
            self.ctx.app, self.ctx.workspace, self.handle.id, node, new_session=False
        )
        self._moved(result)

    async def checkout(self, arguments: str) -> None:
        from coder_es.clients import branch_ops

        if not arguments:
            raise UsageError("/checkout NODE (/tree shows the nodes)")
        self._moved(branch_ops.switch(self.ctx.app, self.ctx.workspace, self.handle.id, arguments))

    async def diff(self, arguments: str) -> None:
        from coder_es.branching import Branching
        from coder_es.clients import branch_ops

        nodes = arguments.split()
        if len(nodes) > 2:
            raise UsageError("/diff [A [B]]")
        if not nodes:
            tree = Branching(self.ctx.app, self.ctx.workspace).tree(self.handle.id)
            mine = [n for n in tree.path(tree.head_node) if tree.kind(n) == "user"]
            if not mine:
                raise UsageError("nothing to compare: no message has been sent yet")
            nodes = [mine[-1]]
        a, b = nodes[0], nodes[1] if len(nodes) == 2 else "HEAD"
        print(branch_ops.diff_text(self.ctx.app, self.ctx.workspace, self.handle.id, a, b))

    async def label(self, arguments: str) -> None:
        from coder_es.clients import branch_ops

        words = arguments.split()
        if len(words) != 2:
            raise UsageError("/label NODE NAME")
        move = branch_ops.label(self.ctx.app, self.ctx.workspace, self.handle.id, *words)
        self.err.print(f"[dim]label {escape(words[1])} -> node {escape(str(move.node))}[/dim]")

    async def search(self, arguments: str) -> None:
        from coder_es.clients.search_ops import search_hits

        if not arguments:
            raise UsageError("/search TEXT")
        hits = search_hits(self.ctx.app, arguments, session=self.handle.id)
        if not hits:
            self.err.print("[dim]no match in this session[/dim]")
        for h in hits:
            print(f"{h['node']:>6} {h['kind']:<11} {' '.join(str(h['snippet']).split())}")

    async def model(self, arguments: str) -> None:
        await self._settings("model", arguments)

    async def agent(self, arguments: str) -> None:
        await self._settings("agent", arguments)

    async def _settings(self, which: str, value: str) -> None:
        opened = self.handle.opened()
        if not value:
            self.err.print(f"{which}: {escape(getattr(opened, which))}")
            return
        # Opened again with the new value: ``open_session`` records a ``SettingsChanged``.
        args = argparse.Namespace(**vars(self.args))
        args.session = self.handle.id
        setattr(args, which, value)
        if which == "model":
            args.provider = args.provider or opened.provider
            if opened.provider == "scripted":
                raise UsageError(
                    "the scripted provider's model is its script: /model cannot change it"
                )
        handle = await _open(args, self.ctx)
        old, self.handle, self.args = self.handle, handle, args
        await old.close()
        self.err.print(f"[dim]{which} is now {escape(getattr(handle.opened(), which))}[/dim]")

    async def pending(self, _: str) -> None:
        waiting = self.handle.pending_questions
        if not waiting:
            self.err.print("[dim]no permission question is waiting[/dim]")
        for call in waiting:
            self.err.print(f"  {escape(call)}")

    async def cost(self, _: str) -> None:
        from coder_es.cli.sessions import _usage_line

        session = self.handle.loop.session.id
        print(_usage_line(self.ctx, session, self.ctx.app.session_events(session)))

    async def attach(self, path: str) -> None:
        """``/image PATH``: the image goes with the next message (a bad one is refused here)."""
        if not path:
            self.err.print("[red]/image needs a PATH[/red]")
            return
        try:
            self.images.append(read_image_file(path))
        except UsageError as e:
            self.err.print(f"[red]{escape(str(e))}[/red]")
            return
        count = len(self.images)
        self.err.print(f"[dim]image attached ({count}); it goes with your next message[/dim]")

    # ------------------------------------------------------------------ turns

    async def message(self, text: str) -> None:
        """A message's turn; one refused before it starts (its session's turn is parked,
        waiting for an answer) is one line, and the chat goes on."""
        try:
            await self.turn(text)
        except UsageError as e:
            self.err.print(f"[red]{escape(str(e))}[/red]", soft_wrap=True)

    async def turn(self, text: str) -> None:
        before = _version(self.ctx, self.handle)
        images, self.images = self.images, []
        self.waiting.start()
        try:
            async for update in self.handle.send(text, images=images, answerer=self.answerer):
                if isinstance(update, _ANSWERING):
                    self.waiting.stop()
                if self.as_json:
                    print_json(update.to_dict())
                    sys.stdout.flush()
                elif isinstance(update, up.PermissionRequired):
                    self.renderer.line(
                        f"[bold yellow]permission[/bold yellow] {escape(update.tool)} "
                        f"[bold]{escape(update.subject)}[/bold] "
                        f"[dim]({escape(update.reason)})[/dim]"
                    )
                else:
                    self.renderer.show(update)
                if isinstance(update, up.PermissionRequired) and not self.yes:
                    self._event(update.tool_use_id).set()
                if isinstance(update, up.ToolCompleted):
                    self.waiting.start()  # the results go back to the model: a new request
        finally:
            self.waiting.stop()
        self.ctx.end_turn(self.handle.id)
        if not self.as_json:
            _conflict_hints(self.ctx, self.handle, before, self.err)

    def _event(self, tool_use_id: str) -> asyncio.Event:
        return self._shown.setdefault(tool_use_id, asyncio.Event())

    async def ask(self, q: up.PermissionRequired) -> PermissionAnswer:
        """The user's answer; runs inside the turn, so Ctrl-C (cancelling the turn) ends it."""
        await self._event(q.tool_use_id).wait()
        self._shown.pop(q.tool_use_id, None)
        while True:
            try:
                raw = await self.read(
                    f"  allow [o]nce, [a]lways ({q.suggested_pattern}), or [r]eject? ",
                    message=False,
                )
            except KeyboardInterrupt:  # at a terminal prompt: cancel the turn, as a signal would
                self.handle.cancel()
                await asyncio.sleep(0)  # the cancellation lands here
                return PermissionAnswer.reject("cancelled by the user")
            choice = "r" if raw is None else raw.strip().lower()[:1]
            if choice == "o":
                return PermissionAnswer.allow_once()
            if choice == "a":
                return PermissionAnswer.allow_always(q.suggested_pattern)
            if choice == "r":
                why = None if raw is None else await self._reason()
                return PermissionAnswer.reject(why or "rejected by the user")

    async def _reason(self) -> str | None:
        try:
            line = await self.read("  reason (optional): ", message=False)
        except KeyboardInterrupt:
            return None
        return line.strip() if line else None


def terminal_input(ctx: Context) -> ChatInput | None:
    """prompt_toolkit where both ends are a terminal; None elsewhere (plain lines)."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        return None
    completer = SlashAndPathCompleter([(c, what) for c, _, what in SLASH_COMMANDS], ctx.workspace)
    return TerminalInput(history_file(user_data_dir(), ctx.workspace), completer)


async def chat(args: argparse.Namespace, ctx: Context) -> int:
    handle = await _open(args, ctx)
    if handle.resumed:
        # Fail at once, not at the first message, if another process is driving the session
        # (each turn takes the session's lease again).
        try:
            with handle.leased("chat"):
                pass
        except BaseException:
            await handle.close()
            raise
    session = Chat(args, handle, ctx, None if args.json else terminal_input(ctx))
    loop = asyncio.get_running_loop()
    installed = False
    try:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGINT, session.on_sigint)
            installed = True
        code = await session.run()
        await handle.end("prompt_input_exit")
        return code
    finally:
        if installed:
            loop.remove_signal_handler(signal.SIGINT)
        await session.handle.close()


def cmd_chat(args: argparse.Namespace, ctx: Context) -> Any:
    return asyncio.run(chat(args, ctx))
