"""Helpers shared by the tool tests (importable: conftest modules of two folders clash)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from coder_es.sandbox import SandboxSettings, availability

sys.path.insert(0, str(Path(__file__).parent))


class RecordingSink:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def observe_file(self, **kwargs: Any) -> None:
        self.events.append(("observe_file", kwargs))

    def apply_edit(self, **kwargs: Any) -> None:
        self.events.append(("apply_edit", kwargs))


def shell_settings(mode: str, root: Path) -> SandboxSettings:
    """Settings for one of the two ways bash runs; skips where the sandbox cannot run."""
    settings = SandboxSettings(mode="off" if mode == "fallback" else "auto")
    if mode == "sandbox":
        found = availability(settings, root)
        if not found.active:
            pytest.skip(f"the namespace sandbox is unavailable here: {found.reason}")
    return settings
