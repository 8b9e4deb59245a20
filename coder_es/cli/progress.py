"""Progress on standard error for commands that can take more than a second.

Shown only to a person: when standard error is a terminal and the command does not print JSON.
Under ``--json``, in a pipe, a file or CI logs, nothing is drawn (rich's own detection would
draw when ``FORCE_COLOR`` is set, so the decision is made here from the stream itself).

``bars`` gives counted bars (``done`` of ``total``: files restored, events replayed); ``working``
a spinner with the elapsed time for work that has no count (verifying a store, exporting).
Both are transient: they leave the terminal as it was.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol, TextIO

if TYPE_CHECKING:
    from rich.console import Console

# rich is imported only when progress is drawn: most runs are not on a terminal, and importing
# rich.progress costs a command's start-up ~20 ms (issue 35).

Report = Callable[[int, int], None]
"""A progress callback: (done, total)."""


def _quiet(_done: int, _total: int) -> None:
    pass


class Bars(Protocol):
    def __call__(self, description: str, min_total: int = 1) -> Report: ...


def shown(as_json: bool = False, stream: TextIO | None = None) -> bool:
    """Whether progress is drawn: a terminal on standard error, and no JSON output."""
    stream = stream if stream is not None else sys.stderr
    if as_json or os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (ValueError, OSError):
        return False


def _console(console: Console | None) -> Console:
    from rich.console import Console

    return console if console is not None else Console(stderr=True)


@contextmanager
def bars(enabled: bool, *, console: Console | None = None) -> Iterator[Bars]:
    """A factory of counted bars: ``bars(...)("restoring files", min_total=50)`` is a
    ``Report``. A bar appears on its first report with a total of at least ``min_total``, so
    short work draws nothing."""
    if not enabled:
        yield lambda _description, min_total=1: _quiet
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=_console(console),
        transient=True,
    )
    with progress:

        def make(description: str, min_total: int = 1) -> Report:
            task: list[Any] = []

            def report(done: int, total: int) -> None:
                if not task:
                    if total < min_total:
                        return
                    task.append(progress.add_task(description, total=total))
                progress.update(task[0], completed=done, total=total)

            return report

        yield make


@contextmanager
def working(description: str, enabled: bool, *, console: Console | None = None) -> Iterator[None]:
    """A spinner with the elapsed time while the block runs."""
    if not enabled:
        yield
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=_console(console),
        transient=True,
    )
    with progress:
        progress.add_task(description, total=None)
        yield
