"""Fixtures for the replay tests (helpers live in replay_helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture(autouse=True)
def _recording_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Live replay re-runs the recorded commands, and their output depends on the environment:
    with ``CI`` set, pytest stops shortening its summary lines. The cassettes were recorded
    without it, so the commands they re-run must not see it either."""
    monkeypatch.delenv("CI", raising=False)
