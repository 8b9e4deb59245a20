"""The sandbox's allow-list through whole sessions (issue 29, item 3): under ``build`` a program's
write outside the workspace fails (nothing to record or rewind), under ``plan`` commands have no
network unless the configuration gives it."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_helpers import Harness, collect, text, tool, turn

from coder_es.sandbox import SandboxSettings, availability


@pytest.fixture
def sandboxed(h: Harness) -> Harness:
    found = availability(SandboxSettings(), h.root)
    if not found.active:
        pytest.skip(f"the namespace sandbox is unavailable here: {found.reason}")
    return h


@pytest.fixture
def listener() -> Iterator[int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


def test_build_cannot_write_outside_and_the_workspace_write_lands(sandboxed: Harness) -> None:
    h = sandboxed
    target = Path("/etc") / f"coder_es_probe_outside_{uuid.uuid4().hex[:8]}"
    (h.root / "mk.py").write_text(
        f"open('made.txt', 'w').write('in')\nopen('{target}', 'w').write('out')\n"
    )
    try:
        handle = h.start([turn(tool("bash", command="python3 mk.py")), turn(text("done"))])
        collect(handle, "build it")
        assert not target.exists()
        (done,) = h.of(handle, "ToolCallCompleted")
        assert "Read-only file system" in done.output
        assert (h.root / "made.txt").read_text() == "in"
    finally:
        target.unlink(missing_ok=True)


def probe(port: int) -> str:
    return f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 3)\""


def test_plan_commands_have_no_network_build_commands_do(sandboxed: Harness, listener: int) -> None:
    h = sandboxed
    plan = h.start([turn(tool("bash", command=probe(listener))), turn(text("."))], agent="plan")
    collect(plan, "look", yes=True)
    (cut_off,) = h.of(plan, "ToolCallCompleted")
    assert cut_off.is_error and "Connection refused" in cut_off.output, cut_off.output
    build = h.start([turn(tool("bash", command=probe(listener))), turn(text("."))])
    collect(build, "look")
    (reached,) = h.of(build, "ToolCallCompleted")
    assert not reached.is_error, reached.output
