"""pytest plugin (entry point ``coder_es_replay``): replay cassettes in tests.

A marker replays one cassette for a test; the ``replay_report`` fixture runs it and returns the
report (the test fails with the divergence report when the replay diverges)::

    @pytest.mark.replay_cassette("coder_es/data/sessions/fix-failing-test.cassette.jsonl",
                                 mode="live")
    def test_fix(replay_report):
        assert replay_report.tool_calls == 4

The ``replay`` fixture does the same for any number of cassettes inside one test::

    def test_sessions(replay):
        replay("coder_es/data/sessions/refactor-across-files.cassette.jsonl", mode="verify")

Recording: by default nothing is ever recorded, so a test whose cassette is missing fails (CI
fails on anything unrecorded). ``pytest --replay-record`` (re)records the cassettes that have a
``recorder`` (a callable given the cassette path, which runs a scripted or live session and
writes the cassette there) before replaying them. Relative paths are relative to pytest's root
directory. ``--replay-mode verify|live`` overrides the mode of every replay.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from replay.report import ReplayReport

# The plugin loads with every pytest run of the project: the replay machinery is imported only
# when a test replays something.
MODES = ("verify", "live")

Recorder = Callable[[Path], object]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("coder-es replay")
    group.addoption(
        "--replay-record",
        action="store_true",
        default=False,
        help="(re)record cassettes that have a recorder before replaying them "
        "(default: never record; a missing cassette fails the test)",
    )
    group.addoption(
        "--replay-mode",
        choices=MODES,
        default=None,
        help="replay every cassette in this mode (default: each test's own)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "replay_cassette(path, mode='verify', recorder=None): replay a coder-es cassette "
        "(the replay_report fixture runs it; --replay-record records it first)",
    )


class CassetteReplayer:
    """Replays cassettes for one test; a divergence or a missing cassette fails the test."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.record = bool(config.getoption("--replay-record"))
        self.forced_mode: str | None = config.getoption("--replay-mode")

    def path(self, path: str | Path) -> Path:
        p = Path(path)
        return p if p.is_absolute() else Path(self.config.rootpath) / p

    def __call__(
        self,
        path: str | Path,
        *,
        mode: str = "verify",
        recorder: Recorder | None = None,
        **options: Any,
    ) -> ReplayReport:
        from replay.cassette import CassetteError, load_cassette
        from replay.engine import ReplayOptions, replay_cassette

        target = self.path(path)
        if self.record and recorder is not None:
            recorder(target)
        if not target.is_file():
            hint = (
                "run pytest with --replay-record to record it"
                if recorder is not None
                else "record it (coder-es record-cassette SESSION -o FILE), or give the test a "
                "recorder and run pytest with --replay-record"
            )
            pytest.fail(f"cassette {target} is not recorded; {hint}", pytrace=False)
        try:
            cassette = load_cassette(target)
        except CassetteError as e:
            pytest.fail(f"cannot read the cassette: {e}", pytrace=False)
        report = replay_cassette(cassette, ReplayOptions(mode=self.forced_mode or mode, **options))
        if not report.ok:
            pytest.fail(report.render(), pytrace=False)
        return report


@pytest.fixture
def replay(request: pytest.FixtureRequest) -> CassetteReplayer:
    """Replay cassettes in a test: ``replay(path, mode=..., recorder=...)``."""
    return CassetteReplayer(request.config)


@pytest.fixture
def replay_report(request: pytest.FixtureRequest, replay: CassetteReplayer) -> ReplayReport:
    """The report of the cassette named by the test's ``replay_cassette`` marker."""
    marker = request.node.get_closest_marker("replay_cassette")
    if marker is None or not marker.args:
        pytest.fail(
            "replay_report needs @pytest.mark.replay_cassette(path, ...) on the test",
            pytrace=False,
        )
    return replay(marker.args[0], **marker.kwargs)
