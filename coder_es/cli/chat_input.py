"""What ``coder-es chat`` reads the user's lines with.

At a terminal: prompt_toolkit (the library aider and IPython use) for line editing, a history
per workspace, multi-line messages (Esc then Enter, or Alt-Enter, inserts a line break) and
completion of slash commands and paths. Elsewhere (a pipe, a file, a test): plain lines read by
the event loop (``LineReader``), so a read is a cancellable await.

Either way a read returns the line, or None at the end of input (Ctrl-D); at a terminal Ctrl-C at
a prompt raises ``KeyboardInterrupt`` from the read (the terminal is in raw mode there, so no
signal is sent), and the caller decides what it means.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Protocol

from prompt_toolkit import PromptSession
from prompt_toolkit.completion import CompleteEvent, Completer, Completion, PathCompleter
from prompt_toolkit.document import Document
from prompt_toolkit.history import FileHistory, History, InMemoryHistory
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent


class ChatInput(Protocol):
    async def read(self, prompt: str, *, message: bool) -> str | None:
        """The next line (``message``: a message, with history and completion; else a short
        answer); None at the end of input."""
        ...


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


class PlainInput:
    """Not a terminal: the prompt written to ``write``, the line read by ``LineReader``."""

    def __init__(self, fd: int, write: WritePrompt) -> None:
        self.reader = LineReader(fd)
        self.write = write

    async def read(self, prompt: str, *, message: bool) -> str | None:
        self.write(prompt)
        return await self.reader.readline()


class WritePrompt(Protocol):
    def __call__(self, text: str) -> None: ...


def history_file(data_dir: Path, workspace: Path) -> Path:
    """One history per workspace, in the user's data directory (never in the workspace: what
    the user typed is theirs, not the repository's)."""
    key = hashlib.sha256(str(workspace).encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return data_dir / "chat-history" / key


class SlashAndPathCompleter(Completer):
    """Slash commands at the start of a line; file paths (relative to the workspace) in the word
    being typed after a command or after ``@``."""

    def __init__(self, commands: Sequence[tuple[str, str]], workspace: Path) -> None:
        self.commands = commands
        self.paths = PathCompleter(get_paths=lambda: [str(workspace)], expanduser=False)

    def get_completions(
        self, document: Document, complete_event: CompleteEvent
    ) -> Iterable[Completion]:
        text = document.text_before_cursor
        if text.startswith("/") and " " not in text:
            for name, help_text in self.commands:
                if name.startswith(text):
                    yield Completion(name, start_position=-len(text), display_meta=help_text)
            return
        word = document.get_word_before_cursor(WORD=True)
        if not (text.startswith("/") or word.startswith("@")):
            return
        path = word[1:] if word.startswith("@") else word
        yield from self.paths.get_completions(Document(path, len(path)), complete_event)


class TerminalInput:
    """prompt_toolkit at a terminal: editing, history, multi-line, completion."""

    def __init__(self, history: Path, completer: SlashAndPathCompleter) -> None:
        try:
            history.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            stored: History = FileHistory(str(history))
        except OSError:
            stored = InMemoryHistory()  # a read-only home: history for this run only
        keys = KeyBindings()

        @keys.add("escape", "enter")
        def _newline(event: KeyPressEvent) -> None:
            event.current_buffer.insert_text("\n")

        self._messages = PromptSession[str](
            history=stored,
            completer=completer,
            prompt_continuation="… ",
            complete_while_typing=False,
            key_bindings=keys,
            multiline=False,
        )
        self._answers = PromptSession[str]()

    async def read(self, prompt: str, *, message: bool) -> str | None:
        session = self._messages if message else self._answers
        try:
            # handle_sigint=False: our own SIGINT handler (cancel the turn) must stay installed.
            return await session.prompt_async(prompt, handle_sigint=False)
        except EOFError:
            return None
