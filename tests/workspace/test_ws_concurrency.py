"""Concurrent edits: a second process keeps editing a file while the agent edits it."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from coder_es.domain.session import Session
from coder_es.store.blobs import MemoryBlobStore
from coder_es.workspace import Workspace
from coder_es.workspace.atomic import compare_and_swap_at

# An editor that appends a line at a time, each write atomic and checked under the same advisory
# lock protocol the workspace uses, so neither side can overwrite the other unseen.
USER = textwrap.dedent(
    """
    import fcntl, os, sys, time
    path, stop, out = sys.argv[1:4]
    k = 0
    while not os.path.exists(stop):
        fd = os.open(path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.fstat(fd).st_ino != os.stat(path).st_ino:
                continue  # replaced while we waited for the lock: read again
            data = b""
            while chunk := os.read(fd, 65536):
                data += chunk
            tmp = path + ".user-tmp"
            with open(tmp, "wb") as f:
                f.write(data + b"appended by user #%d\\n" % k)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            k += 1
        finally:
            os.close(fd)
        time.sleep(0.0005)
    open(out, "w").write(str(k))
    """
)


def test_agent_and_a_concurrent_writer_never_lose_each_others_lines(
    ws: Workspace, root: Path, tmp_path: Path
) -> None:
    path = root / "shared.txt"
    path.write_text("".join(f"line {i}\n" for i in range(40)))
    stop, out = tmp_path / "stop", tmp_path / "count"
    user = subprocess.Popen([sys.executable, "-c", USER, str(path), str(stop), str(out)])
    try:
        ws.read("shared.txt")
        # The edits start once the user's editor writes (a fixed pause let a loaded machine
        # start the editor after the last edit: nothing concurrent was tested).
        deadline = time.monotonic() + 60
        while b"appended by user #0" not in path.read_bytes():
            assert time.monotonic() < deadline and user.poll() is None
            time.sleep(0.01)
        outcomes = []
        for i in range(30):
            result = ws.edit("shared.txt", f"line {i}\n", f"line {i} (agent)\n")
            outcomes.append(result.outcome)
            assert result.ok, result.message_for_agent
    finally:
        stop.write_text("")
        user.wait(timeout=30)
    appended = int(out.read_text())
    final = path.read_text().splitlines()
    assert final[:30] == [f"line {i} (agent)" for i in range(30)]
    assert final[30:40] == [f"line {i}" for i in range(30, 40)]
    assert final[40:] == [f"appended by user #{k}" for k in range(appended)]
    assert appended > 0 and "merged" in outcomes


def compare_and_swap(path: Path, data: bytes | None, *, expected: bytes | None) -> bool:
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return compare_and_swap_at(dir_fd, path.name, data, expected=expected)
    finally:
        os.close(dir_fd)


def test_compare_and_swap_refuses_when_the_disk_moved(tmp_path: Path) -> None:
    p = tmp_path / "f.txt"
    p.write_bytes(b"user's\n")
    assert not compare_and_swap(p, b"agent's\n", expected=b"what the agent saw\n")
    assert p.read_bytes() == b"user's\n"
    assert not compare_and_swap(p, b"agent's\n", expected=None)  # it exists now
    assert not compare_and_swap(p, None, expected=b"other\n")
    assert p.read_bytes() == b"user's\n"
    assert compare_and_swap(p, b"agent's\n", expected=b"user's\n")
    assert p.read_bytes() == b"agent's\n"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["f.txt"]


LINE = st.sampled_from(["a\n", "b\n", "c\n", "}\n", "\n", "x = 1\n"])


@given(
    base=st.lists(LINE, min_size=1, max_size=15),
    agent=st.lists(LINE, max_size=15),
    at=st.integers(min_value=0, max_value=15),
    use_edit=st.booleans(),
)
@settings(max_examples=60, deadline=None)
def test_the_users_inserted_line_is_never_lost(
    base: list[str], agent: list[str], at: int, use_edit: bool
) -> None:
    """Kept in the file, or a conflict is reported and the file is exactly the user's."""
    unique = "USER'S UNIQUE LINE\n"
    at = min(at, len(base))
    user = "".join([*base[:at], unique, *base[at:]])
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ws = Workspace(root, MemoryBlobStore(), Session.start(workspace=tmp))
        (root / "f.txt").write_text("".join(base))
        ws.read("f.txt")
        (root / "f.txt").write_text(user)
        if use_edit:
            # Replace the first base line with the agent's lines (matched in the agent's view).
            result = ws.edit("f.txt", "".join(base), "".join(agent) or "nothing\n")
        else:
            result = ws.write("f.txt", "".join(agent))
        on_disk = (root / "f.txt").read_text()
        if result.ok:
            assert unique in on_disk
        else:
            # A conflict, or an edit that changes nothing (old_string == new_string).
            assert result.outcome in ("conflict", "error") and on_disk == user
