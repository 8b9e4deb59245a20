"""The sandbox is an allow-list of writable places (issue 29, item 3): the workspace (through the
overlay), a private ``/tmp`` and the places ``[sandbox] writable`` names; everything else is
read-only for every preset. Read-only agents get no network unless ``network = true``; a
setuid/setgid bit or a special file a command made never reaches the workspace."""

from __future__ import annotations

import os
import stat
import uuid
from pathlib import Path
from typing import Any

import pytest
from shell_helpers import RecordingSink, shell_settings
from test_tool_shell_search import Make, run

from coder_es.sandbox import SandboxSettings
from coder_es.store.blobs import MemoryBlobStore
from coder_es.tools.base import ToolContext
from coder_es.workspace.workspace import Workspace


@pytest.fixture
def sandboxed(repo: Path) -> Make:
    """Tool contexts that run bash in the namespace sandbox (skipped where it cannot run)."""
    sink = RecordingSink()
    ws = Workspace(repo, MemoryBlobStore(), sink)
    shell_settings("sandbox", ws.root)

    def make(**kwargs: Any) -> ToolContext:
        kwargs.setdefault("sandbox", SandboxSettings())
        return ToolContext(ws.root, "t1", sink, ws, **kwargs)

    return make


@pytest.fixture
def probe_name() -> str:
    return f"coder_es_probe_outside_{uuid.uuid4().hex[:8]}"


def test_a_build_program_cannot_write_outside_the_workspace(
    sandboxed: Make, repo: Path, probe_name: str
) -> None:
    """The reproduction: ``python3 mk.py`` wrote /etc/... under ``build``; it must fail in the
    kernel, leave nothing on the real disk, and the workspace write next to it still lands."""
    target = Path("/etc") / probe_name
    (repo / "mk.py").write_text(
        f"open('out.txt', 'w').write('inside')\nopen('{target}', 'w').write('outside')\n"
    )
    try:
        res = run("bash", {"command": "python3 mk.py"}, sandboxed())
        assert not target.exists(), "a build command wrote outside the workspace"
        assert "Read-only file system" in res.output and res.is_error
        assert (repo / "out.txt").read_text() == "inside"
    finally:
        target.unlink(missing_ok=True)


def test_every_way_out_is_read_only(
    sandboxed: Make, repo: Path, tmp_path: Path, probe_name: str
) -> None:
    """Variants: a sibling of the workspace, the home directory, /var/tmp, a new directory, a
    link, a rename out of the workspace, remounting or unmounting to get a writable view. (The
    sibling is under /tmp here: the command sees it through its private /tmp, where its write
    lands and stays.)"""
    sibling = tmp_path / "other-project"
    sibling.mkdir()
    home = Path(os.path.expanduser("~"))
    attempts = [
        f"echo x > {sibling}/{probe_name}",
        f"echo x > {home}/{probe_name}",
        f"echo x > /var/tmp/{probe_name}",
        f"mkdir /opt/{probe_name}",
        f"ln -s /etc/passwd {home}/{probe_name}",
        f"mv README.md /var/tmp/{probe_name}",
        f"mount -o remount,rw / && echo x > /etc/{probe_name}",
        f"umount -l /etc; echo x > /etc/{probe_name}",
        f"cd {sibling} && git init -q {probe_name}",
    ]
    ctx = sandboxed()
    try:
        for command in attempts:
            res = run("bash", {"command": command}, ctx)
            assert "could not be set up" not in res.output, res.output
        for where in (sibling, home, Path("/var/tmp"), Path("/opt"), Path("/etc")):
            assert not (where / probe_name).exists(), (where, probe_name)
        assert (repo / "README.md").exists()
    finally:
        for where in (sibling, home, Path("/var/tmp"), Path("/opt"), Path("/etc")):
            p = where / probe_name
            if p.is_symlink() or p.is_file():
                p.unlink()
            elif p.is_dir():
                import shutil

                shutil.rmtree(p)


def test_tmp_is_private_and_writable(sandboxed: Make, probe_name: str) -> None:
    res = run(
        "bash",
        {"command": f"echo ok > /tmp/{probe_name} && cat /tmp/{probe_name} && : > /dev/shm/x"},
        sandboxed(),
    )
    assert res.output.startswith("ok\n") and not res.is_error, res.output
    assert not Path("/tmp", probe_name).exists()


def test_named_writable_places_are_writable(sandboxed: Make, repo: Path, tmp_path: Path) -> None:
    """``[sandbox] writable``: a cache directory (here under /tmp, so that it must survive the
    private /tmp; with a space in its name), and a second, nested one; writes land on the real
    disk, the workspace still goes through the overlay, and other places stay read-only."""
    cache = tmp_path / "pip cache"  # a space: mount tables escape it (\040)
    cache.mkdir()
    (cache / "old").write_text("old")
    other = tmp_path / "other"
    other.mkdir()
    more = tmp_path / "more" / "deep"
    more.mkdir(parents=True)
    settings = SandboxSettings(writable=(cache, more))
    command = (
        f"echo new > '{cache}/new' && rm '{cache}/old' && echo deep > {more}/d && "
        f"echo ws > ws.txt; echo no > {other}/no; cat '{cache}/new'"
    )
    res = run("bash", {"command": command}, sandboxed(sandbox=settings))
    assert "could not be set up" not in res.output, res.output
    assert (cache / "new").read_text() == "new\n"
    assert not (cache / "old").exists()
    assert (more / "d").read_text() == "deep\n"
    assert (repo / "ws.txt").read_text() == "ws\n"
    assert not (other / "no").exists()
    assert [c.path for c in res.files_changed] == ["ws.txt"]


def test_a_writable_place_holding_the_workspace(sandboxed: Make, repo: Path) -> None:
    """A writable parent of the workspace: the workspace itself still goes through the overlay
    (its changes are recorded), the rest of the parent is writable."""
    parent = repo.parent
    settings = SandboxSettings(writable=(parent,))
    res = run(
        "bash",
        {"command": f"echo a > {parent}/beside.txt; echo b > in.txt"},
        sandboxed(sandbox=settings),
    )
    assert "could not be set up" not in res.output, res.output
    assert (parent / "beside.txt").read_text() == "a\n"
    assert [c.path for c in res.files_changed] == ["in.txt"]


def test_read_only_agents_get_no_network_unless_configured(sandboxed: Make) -> None:
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    connect = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3)"
    probe = f'python3 -c "{connect}"'
    try:
        plan = run("bash", {"command": probe}, sandboxed(sandbox=SandboxSettings(read_only=True)))
        assert plan.is_error and "Connection refused" in plan.output, plan.output
        opened = SandboxSettings(read_only=True, network=True)
        assert not run("bash", {"command": probe}, sandboxed(sandbox=opened)).is_error
        build = run("bash", {"command": probe}, sandboxed())
        assert not build.is_error, build.output
    finally:
        server.close()


def test_setuid_and_setgid_bits_never_reach_the_workspace(sandboxed: Make, repo: Path) -> None:
    command = (
        "cp /bin/true suid && chmod 4755 suid && touch sgid && chmod 2755 sgid && "
        "chmod u+s README.md && mkdir shared && chmod 2775 shared"
    )
    res = run("bash", {"command": command}, sandboxed())
    assert not res.is_error, res.output
    for name in ("suid", "sgid", "README.md", "shared"):
        mode = os.lstat(repo / name).st_mode
        assert not mode & (stat.S_ISUID | stat.S_ISGID), (name, oct(mode))
    assert os.lstat(repo / "suid").st_mode & 0o777 == 0o755
    assert "suid: its setuid/setgid bits were removed" in res.output
    assert "shared: its setuid/setgid bits were removed" in res.output


def test_sockets_and_fifos_are_reported_not_carried(sandboxed: Make, repo: Path) -> None:
    command = (
        'mkfifo pipe; python3 -c "import socket; s = socket.socket(socket.AF_UNIX); '
        "s.bind('sock')\"; mknod dev c 1 3 2>/dev/null; echo done"
    )
    res = run("bash", {"command": command}, sandboxed())
    for name in ("pipe", "sock", "dev"):
        assert not os.path.lexists(repo / name), name
    assert "pipe: a fifo, socket or device file" in res.output
    assert "sock: a fifo, socket or device file" in res.output


def test_the_users_own_setgid_directory_keeps_its_bit(sandboxed: Make, repo: Path) -> None:
    """A group-shared directory (setgid) the command writes into is copied up with its bit: the
    bit is the user's, not the command's, and stays; nothing is reported."""
    shared = repo / "shared"
    shared.mkdir()
    os.chmod(shared, 0o2775)
    res = run("bash", {"command": "echo x > shared/new.txt"}, sandboxed())
    assert not res.is_error, res.output
    assert os.lstat(shared).st_mode & stat.S_ISGID
    assert (shared / "new.txt").read_text() == "x\n"
    assert "setuid/setgid" not in res.output
