"""Ctrl-C cancels the running turn (recorded, resumable) instead of killing the process: one
helper for native and harness turns alike."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def sigint_cancels(
    cancel: Callable[[], object], also: tuple[signal.Signals, ...] = ()
) -> Iterator[None]:
    """While the turn runs, SIGINT (and the signals ``also`` names) cancel it."""
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGINT, *also):
        try:
            loop.add_signal_handler(sig, cancel)
        except (NotImplementedError, RuntimeError, ValueError):
            continue
        installed.append(sig)
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
