"""A program installed under ``/tmp`` (a harness CLI npm-installed in a checkout there) runs in
the sandbox, whose ``/tmp`` is private: ``SandboxSpec.readable`` carries its directory over it,
read-only. Without it the program is not found (``unshare: failed to execute ...``)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from coder_es.sandbox.namespaces import SandboxSpec, tools_missing, wrap


def _run(spec: SandboxSpec, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(wrap(spec, list(argv)), capture_output=True, text=True, timeout=60)


@pytest.fixture
def installed(tmp_path: Path) -> tuple[Path, Path, Path]:
    if (why := tools_missing()) is not None:
        pytest.skip(why)
    if not str(tmp_path.resolve()).startswith("/tmp/"):
        pytest.skip(f"the test's directory {tmp_path} is not under /tmp")
    ws = tmp_path / "ws"
    ws.mkdir()
    tools = tmp_path / "tools"
    (tools / "bin").mkdir(parents=True)
    program = tools / "bin" / "hello"
    program.write_text('#!/bin/sh\necho hello from $(dirname "$0")\n')
    program.chmod(0o755)
    return ws, tools, program


def _spec(ws: Path, **kw: object) -> SandboxSpec:
    fstab = ws.parent / "fstab"
    return SandboxSpec(ws, ws, None, None, fstab, **kw)  # type: ignore[arg-type]


def test_a_program_under_tmp_runs_when_its_directory_is_readable(
    installed: tuple[Path, Path, Path],
) -> None:
    ws, tools, program = installed
    hidden = _run(_spec(ws), str(program))
    assert hidden.returncode != 0 and "hello" not in hidden.stdout
    done = _run(_spec(ws, readable=(tools,)), str(program))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"hello from {program.parent}"


def test_a_readable_directory_stays_read_only_and_the_rest_of_tmp_private(
    installed: tuple[Path, Path, Path],
) -> None:
    ws, tools, program = installed
    secret = ws.parent / "secret.txt"
    secret.write_text("another tool's file\n")
    spec = _spec(ws, readable=(tools,))
    write = _run(spec, "/bin/sh", "-c", f"echo x > {tools}/planted")
    assert write.returncode != 0
    assert not (tools / "planted").exists()
    assert _run(spec, "/bin/cat", str(secret)).returncode != 0
    assert os.access(program, os.X_OK)


def test_a_harness_program_is_read_from_its_whole_node_modules(tmp_path: Path) -> None:
    """npm's ``.bin/claude`` links into its package, which loads its neighbours: the sandbox
    carries the outermost ``node_modules``; a program outside one, its own directory."""
    from coder_es.harness.spec import program_places

    modules = tmp_path / "clis" / "node_modules"
    package_bin = modules / "@scope" / "cli" / "bin"
    package_bin.mkdir(parents=True)
    (package_bin / "cli.js").write_text("")
    (modules / ".bin").mkdir()
    (modules / ".bin" / "cli").symlink_to("../@scope/cli/bin/cli.js")
    assert program_places(str(modules / ".bin" / "cli")) == (modules,)
    lone = tmp_path / "bin" / "agent"
    lone.parent.mkdir()
    lone.write_text("")
    assert program_places(str(lone)) == (lone.parent,)
