"""Replaying a cassette (``Store.record_cassette`` writes one) from Python or a pytest test.

In pytest the plugin's ``replay`` fixture does the same and fails the test with the divergence
report (``replay.pytest_plugin``); ``replay_cassette`` returns the report for you to inspect.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from replay.cassette import Cassette
    from replay.report import ReplayReport


def replay_cassette(
    cassette: str | Path | Cassette,
    *,
    mode: str = "verify",
    harnesses: Mapping[str, Mapping[str, Any]] | None = None,
) -> ReplayReport:
    """Run the current code against a recorded session, offline, and compare event by event.

    ``verify``: tools are served from the recording (nothing runs, nothing on disk changes);
    ``live``: tools run again in a scratch copy of the recorded workspace. ``report.ok`` says
    whether the replay matched; ``report.render()`` explains the first divergence. Not from a
    running event loop (the replay runs its own). ``harnesses``: the ``[harnesses]`` entries of
    the configuration, for a live replay of a session recorded with a configured harness (its
    ``env`` values are never recorded, so the replay runs the entry as it is now).
    """
    from replay.cassette import load_cassette
    from replay.engine import ReplayOptions
    from replay.engine import replay_cassette as run

    loaded = load_cassette(cassette) if isinstance(cassette, str | Path) else cassette
    return run(loaded, ReplayOptions(mode=mode, harnesses=harnesses or {}))
