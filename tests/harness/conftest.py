"""Fixtures of the harness tests (helpers: ``harness_helpers``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness_helpers import install_harness_clis


@pytest.fixture(scope="session")
def harness_bin() -> Path:
    return install_harness_clis()
