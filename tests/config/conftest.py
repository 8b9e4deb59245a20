"""Fixtures for the configuration tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from config_helpers import ConfigHome


@pytest.fixture
def home(tmp_path: Path) -> ConfigHome:
    workspace = tmp_path / "project"
    workspace.mkdir()
    xdg = tmp_path / "xdg"
    environ = {"XDG_CONFIG_HOME": str(xdg), "HOME": str(tmp_path / "home")}
    return ConfigHome(workspace=workspace, xdg=xdg, environ=environ)
