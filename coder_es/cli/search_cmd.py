"""``coder-es search QUERY``: find text across every session of the store.

The index (``projections.search``) is caught up with the log before each search; the first
search of a store that was never indexed says so on stderr and, on a terminal, shows progress.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, cast

from coder_es.cli.context import Context, print_json


def cmd_search(args: argparse.Namespace, ctx: Context) -> int:
    from projections.search import Filters, open_index, parse_since, pending, search

    hits = None if args.session else _read_only(args, ctx)
    if hits is not None:
        for hit in hits:
            _show(hit, args.json)
        if not hits and not args.json:
            print("no matches", file=sys.stderr)
        return 0
    app = ctx.app
    filters = Filters(
        session=str(app.resolve_session(args.session)) if args.session else None,
        kind=args.kind,
        since=parse_since(args.since) if args.since else None,
        limit=args.limit,
    )
    index = open_index(app)
    try:
        first = index.position == 0 and pending(app, index) > 0
        if first and not args.json:
            print(f"indexing {pending(app, index)} events for search...", file=sys.stderr)
        with _progress(enabled=first and not args.json and sys.stderr.isatty()) as progress:
            hits = search(app, index, " ".join(args.query), filters, progress=progress)
    finally:
        index.close()
    for hit in hits:
        _show(hit, args.json)
    if not hits and not args.json:
        print("no matches", file=sys.stderr)
    return 0


def _read_only(args: argparse.Namespace, ctx: Context) -> list[Any] | None:
    """The hits when the index has read the whole log, found without building the application
    (``Context.reader``: start-up time); None when there is something to index first (or a
    session to resolve), which needs the application."""
    from projections.search import Filters, open_index, parse_since, pending, search

    reader = ctx.reader()
    if reader is None:
        return None
    filters = Filters(
        kind=args.kind, since=parse_since(args.since) if args.since else None, limit=args.limit
    )
    # The search functions read ``recorder`` and ``config`` alone when nothing is pending.
    log = cast(Any, reader)
    index = open_index(log)
    try:
        if pending(log, index) > 0:
            return None
        found: list[Any] = search(log, index, " ".join(args.query), filters)
        return found
    finally:
        index.close()


def _show(hit: Any, as_json: bool) -> None:
    if as_json:
        print_json(hit.to_dict())
    else:
        _print_hit(hit)


def _print_hit(hit: Any) -> None:
    snippet = hit.highlighted().replace("\n", " ")
    print(f"{hit.session[:8]} node {hit.node:<5} {hit.kind:<9} {hit.score:7.3g}  {snippet}")


class _progress:
    """A rich progress bar on stderr while indexing (only when asked: a terminal, no --json)."""

    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> Any:
        if not self.enabled:
            return None
        from rich.console import Console
        from rich.progress import Progress

        self._bar = Progress(console=Console(stderr=True), transient=True)
        self._bar.start()
        self._task = self._bar.add_task("indexing", total=None)
        return self.update

    def update(self, done: int, total: int) -> None:
        self._bar.update(self._task, completed=done, total=total)

    def __exit__(self, *_: object) -> None:
        if self._bar is not None:
            self._bar.stop()
