"""The search index kept while a command records: the command line's link to
``projections.search.follow``.

Attached to every application the context opens; the projection is imported at the first save,
so a command that only reads loads none of it (tests/core/test_cli_startup.py).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from coder_es.application import CoderApp
    from projections.search.follow import SearchFeed


class SearchIndexFeed:
    """A save observer that starts a ``SearchFeed`` at the first save (none for a backend whose
    index is kept elsewhere)."""

    def __init__(self, app: CoderApp) -> None:
        self.app = app
        self.feed: SearchFeed | None = None
        self._off = False

    @classmethod
    def attach(cls, app: CoderApp) -> SearchIndexFeed:
        feed = cls(app)
        app.save_observers.append(feed.saved)
        return feed

    def saved(self, recordings: list[Any]) -> None:
        feed = self._feed()
        if feed is not None:
            feed.saved(recordings)

    def prepare(self) -> None:
        """Start the feed before the first save: the index is opened (or created) meanwhile,
        not between that save and ``close`` (``run --harness`` while its harness starts up)."""
        feed = self._feed()
        if feed is not None:
            feed.start()

    def _feed(self) -> SearchFeed | None:
        if self._off:
            return None
        if self.feed is None:
            try:
                from projections.search.follow import feed_search_index

                self.feed = feed_search_index(self.app)
            except Exception as e:  # the index is a cache: the save it follows goes on
                print(f"coder-es: the search index is not kept: {e}", file=sys.stderr)
            if self.feed is None:
                self._off = True
        return self.feed

    def close(self) -> None:
        """Index what was saved, then stop following (before the application closes)."""
        self._off = True
        if self.feed is not None:
            self.feed.close()
        if self.saved in self.app.save_observers:
            self.app.save_observers.remove(self.saved)
