"""The ``coder-es`` command line's entry point (``coder-es = coder_es.cli.main:run``).

The parser and the dispatch to a command's handler are ``coder_es.cli.dispatch``; this module
imports nothing more than ``coder_es.cli.helpcache`` until it knows it needs them, so that
``coder-es --help`` prints a kept text without building the parser (issue 35).
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from coder_es.cli.helpcache import help_asked, keep_help, print_cached_help

if TYPE_CHECKING:
    import argparse


def main(argv: Sequence[str] | None = None, *, started: Callable[[], object] | None = None) -> int:
    """Run one command line (``sys.argv`` by default); the exit code (``dispatch.main``)."""
    from coder_es.cli.dispatch import main as dispatch

    return dispatch(argv, started=started)


def build_parser() -> argparse.ArgumentParser:
    from coder_es.cli.dispatch import build_parser as build

    return build()


def declared_parser(name: str) -> argparse.ArgumentParser:
    """The parser of one subcommand with its arguments declared (for tests and docs)."""
    from coder_es.cli.dispatch import declared_parser as declared

    return declared(name)


def run() -> None:
    # Until the command's handler runs, the cyclic collector is off (``_collecting_from_now``).
    gc.disable()
    argv = sys.argv[1:]
    if help_asked(argv):
        if print_cached_help():
            sys.exit(0)
        # Printed by the parser below; kept for the next call.
        keep_help(build_parser().format_help())
    from coder_es.cli.codecache import install

    # The command line's own process: generated dataclass code is compiled once per user.
    args = [a for a in argv[:1] if not a.startswith("-")]
    install(args[0] if args else "top")
    from coder_es.cli.esdomain import install as install_esdomain

    install_esdomain()  # the store readers' eventsourcing.domain, without tokenize (esdomain)
    if args and args[0] in READ_COMMANDS:
        sys.exit(_without_cycle_collection())
    sys.exit(main(started=_collecting_from_now))


def _collecting_from_now() -> None:
    """The command's handler is about to run: what start-up made (the modules, their classes and
    functions, the parser, the configuration: hundreds of thousands of objects, nearly none of
    them garbage) is frozen, out of the cyclic collector's sight, and the collector is on again.
    It was off meanwhile: its passes over those objects, each promoted and scanned again as the
    imports went on, were ~5% of the instructions before a harness run starts its harness
    (callgrind; turned on without freezing, its first pass scanned them all at once)."""
    gc.freeze()
    gc.enable()


READ_COMMANDS = frozenset(
    ("tree", "show", "diff", "sessions", "context", "search", "pending", "export", "verify")
)
"""Short commands that print what the store holds (their writes are committed transactions of
derived indexes, or an export written and closed at once, never left to a finalizer)."""


def _without_cycle_collection() -> int:
    """``main()`` with the cyclic garbage collector seldom run: start-up creates hundreds of
    thousands of objects (modules, classes, functions), so the collector ran dozens of times over
    them, and once more over all of them at interpreter exit: about a tenth of a read command's
    instructions (callgrind, issue 35). The young generation is collected every 50,000
    allocations instead of 700 (so a long export still frees its cycles as it goes), the old one
    practically never, and the objects tracked at the end are frozen (``gc.freeze``), so the
    collection at exit skips them. Only for ``READ_COMMANDS``: a long command (``run``,
    ``chat``, ``serve``) keeps the collector's thresholds (what its start-up made is frozen
    all the same: ``_collecting_from_now``)."""
    before = gc.get_threshold()
    gc.set_threshold(50_000, 50, 1_000)
    try:
        return main(started=_collecting_from_now)
    finally:
        gc.freeze()
        gc.set_threshold(*before)


if __name__ == "__main__":
    run()
