"""``coder-es chat``: messages and permission answers typed at a terminal, Ctrl-C that always
leaves a usable prompt.

Lines are read from standard input by the event loop (``LineReader``), not by ``input()`` in a
thread: a read waiting in a thread cannot be taken back, so after Ctrl-C it would swallow the next
line (answering a question that no longer waits, or leaving the prompt with nothing to read it).
Here a read is a cancellable await. Ctrl-C while a turn runs (streaming, running tools, or waiting
at a permission question) cancels that turn, which is recorded and resumable; the prompt comes
back. Ctrl-C at the message prompt says how to quit and shows the prompt again. The terminal's own
line editing (erase, kill line) applies; there is no history.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from typing import Any

from rich.console import Console
from rich.markup import escape

from coder_es.cli.context import Context, print_json
from coder_es.cli.progress import shown
from coder_es.cli.run import Renderer, _conflict_hints, _open, _version
from coder_es.errors import UsageError
from coder_es.permissions.policy import PermissionAnswer
from coder_es.providers.images import read_image_file
from coder_es.service import updates as up
from coder_es.service.api import SessionHandle, auto_answerer

QUIT = ("/exit", "/quit")
IMAGE = "/image"


class LineReader:
    """Lines from a file descriptor, read by the event loop (cancellable), decoded as UTF-8."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buffer = b""
        self._eof = False

    async def readline(self) -> str | None:
        """The next line without its newline; None at end of input."""
        loop = asyncio.get_running_loop()
        while b"\n" not in self._buffer and not self._eof:
            waiter: asyncio.Future[None] = loop.create_future()

            def readable(waiter: asyncio.Future[None] = waiter) -> None:
                self._read()
                if not waiter.done():
                    waiter.set_result(None)

            try:
                loop.add_reader(self.fd, readable)
            except (OSError, NotImplementedError, ValueError):
                # A regular file (epoll refuses it) or a loop without readers: a read returns
                # at once there, so a thread is fine.
                await asyncio.to_thread(self._read)
                continue
            try:
                await waiter
            finally:
                loop.remove_reader(self.fd)
        line, newline, rest = self._buffer.partition(b"\n")
        if not newline and not line:
            return None
        self._buffer = rest
        return line.decode("utf-8", "replace").rstrip("\r")

    def _read(self) -> None:
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return
        if data:
            self._buffer += data
        else:
            self._eof = True


class Chat:
    """One interactive session on a terminal."""

    def __init__(self, handle: SessionHandle, ctx: Context, as_json: bool, yes: bool) -> None:
        self.handle = handle
        self.ctx = ctx
        self.as_json = as_json
        self.err = Console(stderr=True, highlight=False)
        self.renderer = Renderer(Console(), self.err, spinners=shown(as_json))
        self.reader = LineReader(sys.stdin.fileno())
        self.yes = yes
        self.answerer = auto_answerer(True) if yes else self.ask
        # Set when the question with this tool-use id has been shown: asking waits for it, so the
        # question comes after every update before it (the turn runs ahead of the screen).
        self._shown: dict[str, asyncio.Event] = {}
        self.at_prompt = False  # waiting at the message prompt
        self.prompting = False  # a prompt is on the screen, its line not typed yet
        self.images: list[bytes] = []  # attached with /image, sent with the next message

    def prompt(self, text: str) -> None:
        self.err.file.write(text)
        self.err.file.flush()
        self.prompting = True

    async def readline(self) -> str | None:
        try:
            return await self.reader.readline()
        finally:
            self.prompting = False

    def on_sigint(self) -> None:
        if self.prompting:
            self.err.file.write("\n")  # the terminal echoed ^C after the prompt
            self.prompting = False
        if self.handle.cancel():
            return  # the turn stops (recorded); its updates end with the cancellation
        self.err.print("[dim](Ctrl-D or /exit to quit)[/dim]")
        if self.at_prompt:
            self.prompt("> ")

    async def run(self) -> int:
        self.err.print(
            f"[dim]session {self.handle.id}: type a message; /exit or Ctrl-D to quit; "
            "Ctrl-C cancels a turn[/dim]"
        )
        while True:
            self.prompt("> ")
            self.at_prompt = True
            try:
                text = await self.readline()
            finally:
                self.at_prompt = False
            if text is None:
                self.err.print()
                return 0
            if text.strip() in QUIT:
                return 0
            command, _, path = text.strip().partition(" ")
            if command == IMAGE:
                self.attach(path.strip())
            elif text.strip():
                await self.turn(text)

    def attach(self, path: str) -> None:
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

    async def turn(self, text: str) -> None:
        before = _version(self.ctx, self.handle)
        images, self.images = self.images, []
        async for update in self.handle.send(text, images=images, answerer=self.answerer):
            if self.as_json:
                print_json(update.to_dict())
                sys.stdout.flush()
            elif isinstance(update, up.PermissionRequired):
                self.renderer.line(
                    f"[bold yellow]permission[/bold yellow] {escape(update.tool)} "
                    f"[bold]{escape(update.subject)}[/bold] [dim]({escape(update.reason)})[/dim]"
                )
            else:
                self.renderer.show(update)
            if isinstance(update, up.PermissionRequired) and not self.yes:
                self._event(update.tool_use_id).set()
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
            self.prompt(f"  allow [o]nce, [a]lways ({q.suggested_pattern}), or [r]eject? ")
            raw = await self.readline()
            choice = "r" if raw is None else raw.strip().lower()[:1]
            if choice == "o":
                return PermissionAnswer.allow_once()
            if choice == "a":
                return PermissionAnswer.allow_always(q.suggested_pattern)
            if choice == "r":
                why = None if raw is None else await self._reason()
                return PermissionAnswer.reject(why or "rejected by the user")

    async def _reason(self) -> str | None:
        self.prompt("  reason (optional): ")
        line = await self.readline()
        return line.strip() if line else None


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
    session = Chat(handle, ctx, args.json, args.yes)
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
        await handle.close()


def cmd_chat(args: argparse.Namespace, ctx: Context) -> Any:
    return asyncio.run(chat(args, ctx))
