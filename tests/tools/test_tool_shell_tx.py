"""bash in the namespace sandbox: read-only is the kernel's, the store is out of reach, leftover
processes are killed, and odd changes (a deleted root, symlinks, fifos, modes, non-UTF-8 names,
a full disk) land whole or not at all."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from processes import gone
from shell_helpers import RecordingSink, shell_settings
from test_tool_shell_search import Make, run

from coder_es.sandbox import SandboxSettings
from coder_es.sandbox.transaction import tx_root
from coder_es.store.blobs import MemoryBlobStore
from coder_es.tools.base import ToolContext
from coder_es.userdirs import protected_user_dirs
from coder_es.workspace.workspace import Workspace


def tree_digest(root: Path) -> str:
    """Every path, type, mode and content under ``root`` (``.git`` included)."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        if Path(dirpath) == root and ".coder-es" in dirnames:
            dirnames.remove(".coder-es")
        for name in sorted(filenames + [d for d in dirnames if os.path.islink(Path(dirpath, d))]):
            path = Path(dirpath, name)
            st = path.lstat()
            h.update(f"{path.relative_to(root)}\0{st.st_mode}\0".encode("utf-8", "surrogateescape"))
            if path.is_file() and not path.is_symlink():
                h.update(path.read_bytes())
    return h.hexdigest()


@pytest.fixture
def sandboxed(repo: Path) -> Make:
    """Tool contexts that run bash in the namespace sandbox (skipped where it cannot run)."""
    sink = RecordingSink()
    ws = Workspace(repo, MemoryBlobStore(), sink)
    settings = shell_settings("sandbox", ws.root)

    def make(**kwargs: Any) -> ToolContext:
        kwargs.setdefault("sandbox", settings)
        return ToolContext(ws.root, "t1", sink, ws, **kwargs)

    return make


READ_ONLY_ATTEMPTS = [
    "echo x > a.txt",
    "echo x >| a.txt",
    "echo x >> README.md",
    "exec 3> c.txt; echo x >&3",
    "cat <> d.txt",
    "echo x &> e.txt",
    "git diff --output=b.txt HEAD",
    "git -c user.email=t@t -c user.name=t commit --allow-empty -qm sneaky",
    "git tag sneaky",
    "rg --pre rm hello . || grep -r hello . > f.txt",
    "x='$(touch g.txt)'; echo ${x@P}",
    "python3 -c \"open('h.txt', 'w').write('x')\"",
    "perl -e 'open(F, \">i.txt\"); print F 1'",
    "echo x | tee j.txt",
    "dd if=/dev/zero of=k.txt bs=1 count=1",
    "cp README.md l.txt",
    "sed -i s/Demo/Hacked/ README.md",
    "rm -rf src",
    "chmod 000 README.md",
    "mv README.md m.md",
    "ln -s /etc n",
    "mkdir o",
    "touch -d 2001-01-01 README.md",
    "mount -o remount,rw /",
    "umount -l .",
]


def test_read_only_commands_cannot_change_the_workspace(sandboxed: Make, repo: Path) -> None:
    before = tree_digest(repo)
    ctx = sandboxed(sandbox=SandboxSettings(read_only=True))
    for command in READ_ONLY_ATTEMPTS:
        res = run("bash", {"command": command}, ctx)
        assert res.files_changed == (), command
        assert "could not be set up" not in res.output, res.output
    assert tree_digest(repo) == before
    # A private /tmp is the one writable place.
    res = run("bash", {"command": "echo ok > /tmp/x && cat /tmp/x"}, ctx)
    assert res.output.startswith("ok\n") and not res.is_error


def test_the_store_and_the_users_directories_are_out_of_reach(
    sandboxed: Make, repo: Path, tmp_path: Path
) -> None:
    store = tmp_path / "elsewhere-store"
    store.mkdir()
    (store / "data.mdb").write_bytes(b"log")
    (repo / ".coder-es").mkdir(exist_ok=True)
    (repo / ".coder-es" / "data.mdb").write_bytes(b"log")
    key_dir = protected_user_dirs()[1]
    key_dir.mkdir(parents=True, exist_ok=True)
    (key_dir / "secret.key").write_bytes(b"key")
    for read_only in (False, True):
        settings = SandboxSettings(read_only=read_only, hidden=(store,))
        ctx = sandboxed(sandbox=settings)
        command = (
            f"rm -rf .coder-es/* {store}/* {key_dir}/*; echo junk > .coder-es/data.mdb; "
            f"echo junk > {store}/data.mdb; echo junk > {key_dir}/secret.key; "
            f"ls -A .coder-es {store} {key_dir}"
        )
        res = run("bash", {"command": command}, ctx)
        assert "data.mdb" not in res.output.split("[stderr]")[0]
        assert (repo / ".coder-es" / "data.mdb").read_bytes() == b"log"
        assert (store / "data.mdb").read_bytes() == b"log"
        assert (key_dir / "secret.key").read_bytes() == b"key"
        assert res.files_changed == ()


def test_background_processes_are_killed_and_reported(sandboxed: Make) -> None:
    marker = f"sleep 40.{os.getpid()}"
    res = run("bash", {"command": f"{marker} & echo started"}, sandboxed())
    assert res.is_error
    assert "left processes running" in res.output and marker in res.output
    assert "they were killed" in res.output
    assert gone(marker)


def test_deleting_the_workspace_root_deletes_its_files_and_keeps_the_store(
    sandboxed: Make, repo: Path
) -> None:
    (repo / ".coder-es").mkdir(exist_ok=True)
    (repo / ".coder-es" / "keep").write_text("store")
    res = run("bash", {"command": 'cd .. && rm -rf "$OLDPWD"; ls -A "$OLDPWD"'}, sandboxed())
    assert sorted(os.listdir(repo)) == [".coder-es"]
    assert (repo / ".coder-es" / "keep").read_text() == "store"
    deleted = {c.path for c in res.files_changed if c.after is None}
    assert {"README.md", "src/app.py", "src/util.py", ".gitignore"} <= deleted
    assert not os.listdir(tx_root(repo))


def test_a_directory_replaced_by_a_symlink_to_outside(
    sandboxed: Make, repo: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    res = run("bash", {"command": f"rm -rf src && ln -s {outside} src"}, sandboxed())
    assert os.readlink(repo / "src") == str(outside)
    assert os.listdir(outside) == []
    assert {c.path for c in res.files_changed} == {"src/app.py", "src/util.py"}


def test_fifos_are_skipped_modes_and_odd_names_land(sandboxed: Make, repo: Path) -> None:
    command = "mkfifo pipe; chmod +x src/app.py; touch $'caf\\xe9.txt'; mkdir -p empty/dir"
    res = run("bash", {"command": command}, sandboxed())
    assert not os.path.lexists(repo / "pipe")
    assert "pipe: a fifo, socket or device file" in res.output
    assert os.stat(repo / "src/app.py").st_mode & 0o111
    odd = os.fsdecode(b"caf\xe9.txt")
    assert (repo / odd).exists()
    assert [c.path for c in res.files_changed] == [odd]
    assert "caf\\xe9.txt" in res.output
    assert (repo / "empty" / "dir").is_dir()


def test_ignored_paths_and_git_internals_land_without_being_recorded(
    sandboxed: Make, repo: Path
) -> None:
    command = (
        "echo more >> README.md && git add README.md && "
        "git -c user.email=t@t -c user.name=t commit -qm more && echo out > build/new.py"
    )
    res = run("bash", {"command": command}, sandboxed())
    assert not res.is_error, res.output
    log = subprocess.run(["git", "log", "--oneline"], cwd=repo, capture_output=True, text=True)
    assert "more" in log.stdout
    status = subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True)
    assert status.stdout == b""
    assert (repo / "build/new.py").read_text() == "out\n"
    assert [c.path for c in res.files_changed] == ["README.md"]


def test_git_hooks_and_config_never_land_from_a_command(sandboxed: Make, repo: Path) -> None:
    """Issue 28: coder-es's own apply (outside the sandbox) never writes what makes git run code;
    the note names each; the rest of the command lands."""
    config = (repo / ".git/config").read_bytes()
    command = (
        "printf '#!/bin/sh\\necho pwned\\n' > .git/hooks/pre-commit && "
        "chmod +x .git/hooks/pre-commit && git config core.fsmonitor 'echo pwned' && "
        "echo ok > fine.txt"
    )
    res = run("bash", {"command": command}, sandboxed())
    assert not (repo / ".git/hooks/pre-commit").exists()
    assert (repo / ".git/config").read_bytes() == config
    assert (repo / "fine.txt").read_text() == "ok\n"
    assert ".git/hooks/pre-commit: not applied" in res.output
    assert ".git/config: not applied" in res.output


def test_a_full_disk_leaves_the_workspace_whole(repo: Path, tmp_path: Path) -> None:
    small = tmp_path / "small"
    small.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tiny", str(small)]).returncode:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        ws = small / "ws"
        shutil.copytree(repo, ws, ignore=shutil.ignore_patterns(".git"))
        settings = shell_settings("sandbox", ws)
        workspace = Workspace(ws, MemoryBlobStore(), RecordingSink())
        ctx = ToolContext(ws, "t1", RecordingSink(), workspace, sandbox=settings)
        before = tree_digest(ws)
        res = run("bash", {"command": "echo small > small.txt; head -c 3M /dev/zero > big"}, ctx)
        assert "No space left" in res.output
        if (ws / "small.txt").exists():  # the command's whole result
            assert (ws / "small.txt").read_text() == "small\n"
            assert set((ws / "big").read_bytes()) <= {0}
        else:  # or nothing of it
            assert tree_digest(ws) == before
            assert res.is_error and "the workspace is unchanged" in res.output
        assert not os.listdir(tx_root(ws))
        assert not [p for p in ws.rglob("*coder-es-tmp*")]
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)


def test_without_network_only_loopback_of_its_own_is_reachable(sandboxed: Make) -> None:
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    connect = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3)"
    probe = f'python3 -c "{connect}"'
    try:
        reachable = run("bash", {"command": probe}, sandboxed())
        assert not reachable.is_error, reachable.output
        cut_off = run("bash", {"command": probe}, sandboxed(sandbox=SandboxSettings(network=False)))
        assert cut_off.is_error and "Connection refused" in cut_off.output
    finally:
        server.close()


def test_a_crash_midway_through_applying_is_finished_by_recovery(
    sandboxed: Make, repo: Path, tmp_path: Path
) -> None:
    """Deterministic version of the kill -9 loop: the journal is written, half of the steps are
    applied, the process "dies" (its lock goes); the next start completes the rest."""
    from coder_es.sandbox import recover
    from coder_es.sandbox.journal import seal
    from coder_es.sandbox.namespaces import SandboxSpec, read_report, wrap
    from coder_es.sandbox.transaction import Transaction, apply_steps

    blobs = MemoryBlobStore()
    tx = Transaction.begin(repo)
    read_end, write_end = os.pipe()
    spec = SandboxSpec(repo, repo, tx.upper, tx.work, tx.path / "mounts.fstab")
    command = "for n in 1 2 3 4 5 6; do echo $n > made$n.txt; done; rm src/util.py"
    subprocess.run(wrap(spec, ["sh", "-c", command]), stdin=write_end, check=True)
    os.close(write_end)
    assert read_report(read_end).ready
    plan = tx.plan(repo, {}, blobs)
    (tx.path / "journal.json").write_bytes(seal(plan.steps, [], tx=tx.path.name, workspace=repo))
    apply_steps(plan.steps[:3], repo, blobs, tx.upper)  # then the process dies
    fd = tx._lock_fd
    assert fd is not None
    os.close(fd)
    tx._lock_fd = None
    assert recover(repo, blobs) == [f"{tx.path.name}: completed"]
    assert not (repo / "src/util.py").exists()
    assert [(repo / f"made{n}.txt").read_text() for n in range(1, 7)] == [
        f"{n}\n" for n in range(1, 7)
    ]
    assert not os.listdir(tx_root(repo))
    # A transaction that never journaled is dropped: the workspace is untouched.
    before = tree_digest(repo)
    dropped = Transaction.begin(repo)
    (dropped.upper / "never.txt").write_text("x")
    os.close(dropped._lock_fd or -1)
    dropped._lock_fd = None
    assert recover(repo, blobs) == [f"{dropped.path.name}: dropped"]
    assert tree_digest(repo) == before and not os.listdir(tx_root(repo))
