"""The compare-and-swap protocol by directory descriptor (``atomic.read_at``, ``stage_at``,
``install_at``, ``remove_at``): what a restoration of many files uses, with the guarantees of
the path-based calls and no link followed at the last name."""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from coder_es.workspace.atomic import (
    install_at,
    read_at,
    remove_at,
    stage_at,
    temporary_names,
)
from coder_es.workspace.errors import InvalidPathError


@pytest.fixture
def dir_fd(tmp_path: Path) -> Iterator[int]:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield fd
    finally:
        os.close(fd)


def test_read_at_gives_bytes_and_mode_and_refuses_links_dirs_and_fifos(
    tmp_path: Path, dir_fd: int
) -> None:
    (tmp_path / "f").write_bytes(b"x" * 70_000)
    os.chmod(tmp_path / "f", 0o640)
    assert read_at(dir_fd, "f") == (b"x" * 70_000, 0o640)
    assert read_at(dir_fd, "absent") == (None, None)
    os.symlink(tmp_path / "f", tmp_path / "link")
    with pytest.raises(OSError) as e:
        read_at(dir_fd, "link")
    assert e.value.errno == errno.ELOOP
    (tmp_path / "d").mkdir()
    with pytest.raises(InvalidPathError, match="directory"):
        read_at(dir_fd, "d")
    os.mkfifo(tmp_path / "fifo")
    done: list[BaseException] = []

    def read_fifo() -> None:
        try:
            read_at(dir_fd, "fifo")
        except BaseException as e:  # collected for the assertion below
            done.append(e)

    reader = threading.Thread(target=read_fifo, daemon=True)
    reader.start()
    reader.join(10)
    assert not reader.is_alive(), "reading a FIFO waited for a writer"
    assert isinstance(done[0], InvalidPathError)


def test_install_at_replaces_only_what_was_read_and_never_through_a_link(
    tmp_path: Path, dir_fd: int
) -> None:
    names = temporary_names()
    (tmp_path / "f").write_bytes(b"old\n")
    tmp = names()
    stage_at(dir_fd, tmp, b"new\n", 0o600)
    assert install_at(dir_fd, "f", dir_fd, tmp, expected=b"old\n")
    assert (tmp_path / "f").read_bytes() == b"new\n"
    assert (tmp_path / "f").stat().st_mode & 0o777 == 0o600
    # The disk changed since it was read (same size, other bytes): nothing written.
    tmp = names()
    stage_at(dir_fd, tmp, b"mine\n", None)
    assert not install_at(dir_fd, "f", dir_fd, tmp, expected=b"NEW\n")
    assert (tmp_path / "f").read_bytes() == b"new\n"
    # Creating never overwrites a file that appeared meanwhile.
    (tmp_path / "g").write_bytes(b"theirs\n")
    tmp = names()
    stage_at(dir_fd, tmp, b"ours\n", None)
    assert not install_at(dir_fd, "g", dir_fd, tmp, expected=None)
    assert (tmp_path / "g").read_bytes() == b"theirs\n"
    # A link swapped in for the file read: refused, the link's target untouched.
    outside = tmp_path / "outside"
    outside.write_bytes(b"new\n")
    os.unlink(tmp_path / "f")
    os.symlink(outside, tmp_path / "f")
    tmp = names()
    stage_at(dir_fd, tmp, b"evil\n", None)
    with pytest.raises(OSError):
        install_at(dir_fd, "f", dir_fd, tmp, expected=b"new\n")
    assert outside.read_bytes() == b"new\n" and os.path.islink(tmp_path / "f")
    with pytest.raises(OSError):
        remove_at(dir_fd, "f", b"new\n")
    assert os.path.islink(tmp_path / "f")
    # No temporary file is left behind, whatever happened.
    assert sorted(os.listdir(tmp_path)) == ["f", "g", "outside"]


def test_remove_at_deletes_only_what_was_read(tmp_path: Path, dir_fd: int) -> None:
    (tmp_path / "f").write_bytes(b"a\n")
    assert not remove_at(dir_fd, "f", b"b\n") and (tmp_path / "f").exists()
    assert remove_at(dir_fd, "f", b"a\n") and not (tmp_path / "f").exists()
    assert remove_at(dir_fd, "f", None)
    (tmp_path / "g").write_bytes(b"")
    assert not remove_at(dir_fd, "g", None)


def test_temporary_names_are_distinct_across_threads() -> None:
    names = temporary_names()
    got: list[str] = []

    def take() -> None:
        got.extend(names() for _ in range(2000))

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(got)) == 8000 and all(n.startswith(f"{os.getpid()}.") for n in got)
