"""Fixtures of the workspace tests: a real Session as the event sink and an in-memory blob store."""

from __future__ import annotations

from pathlib import Path

import pytest

from coder_es.domain.session import Session
from coder_es.store.blobs import MemoryBlobStore
from coder_es.workspace import Workspace


@pytest.fixture
def session(tmp_path: Path) -> Session:
    return Session.start(workspace=str(tmp_path))


@pytest.fixture
def blobs() -> MemoryBlobStore:
    return MemoryBlobStore()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "project"
    r.mkdir()
    return r


@pytest.fixture
def ws(root: Path, blobs: MemoryBlobStore, session: Session) -> Workspace:
    return Workspace(root, blobs, session)
