from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from agent_helpers import Harness, make_harness
from backends import store_config_for


@pytest.fixture
def h(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    """A harness on SQLite, or on the backend given by ``ON_EVERY_BACKEND`` (indirect)."""
    backend = getattr(request, "param", "sqlite")
    harness = make_harness(tmp_path, config=store_config_for(request, backend, tmp_path))
    yield harness
    harness.app.close()
