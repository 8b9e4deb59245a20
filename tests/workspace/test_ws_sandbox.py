"""The path sandbox: nothing outside the workspace root without an explicit opt-in."""

from __future__ import annotations

from pathlib import Path

import pytest

from coder_es.domain.session import Session
from coder_es.errors import CoderESError
from coder_es.store.blobs import MemoryBlobStore
from coder_es.workspace import InvalidPathError, PathOutsideWorkspaceError, Workspace


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    d = tmp_path / "outside"
    d.mkdir()
    (d / "secret.txt").write_text("secret\n")
    return d


@pytest.mark.parametrize(
    "path",
    [
        "../outside/secret.txt",
        "sub/../../outside/secret.txt",
        "{outside}/secret.txt",
        "link_out/secret.txt",
        "file_link",
    ],
)
def test_paths_leading_out_are_refused(
    ws: Workspace, root: Path, outside: Path, session: Session, path: str
) -> None:
    (root / "sub").mkdir()
    (root / "link_out").symlink_to(outside)
    (root / "file_link").symlink_to(outside / "secret.txt")
    path = path.format(outside=outside)
    with pytest.raises(PathOutsideWorkspaceError) as info:
        ws.read(path)
    assert isinstance(info.value, CoderESError)
    assert "outside the workspace" in str(info.value)
    with pytest.raises(PathOutsideWorkspaceError):
        ws.write(path, "overwritten\n")
    with pytest.raises(PathOutsideWorkspaceError):
        ws.edit(path, "secret", "x")
    assert (outside / "secret.txt").read_text() == "secret\n"
    assert list(session.collect_events())[1:] == []


def test_explicit_opt_in_reaches_outside_paths(root: Path, outside: Path, session: Session) -> None:
    blobs = MemoryBlobStore()
    ws = Workspace(root, blobs, session)
    r = ws.read(str(outside / "secret.txt"), outside_ok=True)
    assert r.text == "secret\n" and r.path == (outside / "secret.txt").resolve().as_posix()
    allowed = Workspace(root, blobs, session, allowed_outside=[outside])
    allowed.read("../outside/secret.txt")
    assert allowed.edit("../outside/secret.txt", "secret", "public").ok
    assert (outside / "secret.txt").read_text() == "public\n"


def test_inside_paths_are_named_relative_with_posix_separators(ws: Workspace, root: Path) -> None:
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "c.txt").write_text("c\n")
    (root / "alias").symlink_to(root / "a")
    assert ws.read(str(root / "a/b/c.txt")).path == "a/b/c.txt"
    assert ws.read("./a/./b/../b/c.txt").path == "a/b/c.txt"
    assert ws.read("alias/b/c.txt").path == "a/b/c.txt"


@pytest.mark.parametrize("path", ["", "a\0b", "."])
def test_invalid_paths_get_a_clear_error(ws: Workspace, path: str) -> None:
    with pytest.raises(InvalidPathError):
        ws.read(path)


def test_a_directory_is_not_a_file(ws: Workspace, root: Path) -> None:
    (root / "d").mkdir()
    with pytest.raises(InvalidPathError, match="directory"):
        ws.read("d")
    with pytest.raises(InvalidPathError, match="directory"):
        ws.write("d", "x")
