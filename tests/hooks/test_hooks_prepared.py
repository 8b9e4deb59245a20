"""A hook in a sandbox prepared ahead (``tools.with_input``) runs as in one set up at its start:
its input arrives, it sees the workspace as it is when it starts, and what it changes is
captured exactly (a file the user made while the sandbox waited is the base, not a conflict)."""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from coder_es.sandbox import SandboxSettings, availability
from coder_es.sandbox.transaction import tx_root
from coder_es.store.blobs import MemoryBlobStore
from coder_es.tools import with_input
from coder_es.tools.base import ToolContext
from coder_es.workspace.workspace import Workspace


class _Sink:
    def observe_file(self, **_kw: Any) -> None: ...

    def apply_edit(self, **_kw: Any) -> None: ...


def test_a_prepared_sandbox_gets_the_input_sees_the_workspace_and_captures_changes(
    tmp_path: Path,
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "README.md").write_text("hello\n")
    if not availability(SandboxSettings(), root).active:
        pytest.skip("the namespace sandbox is unavailable here")
    ctx = ToolContext(
        root=root,
        tool_use_id="toolu_1",
        sink=_Sink(),
        workspace=Workspace(root, MemoryBlobStore(), _Sink()),
        sandbox=SandboxSettings(),
    )
    with_input.keep_prepared(ctx.cache)

    async def go() -> None:
        first = await with_input.run_with_input("cat > /dev/null", b"{}", 10_000, ctx)
        assert first.returncode == 0
        # Set up while nothing ran: the next hook's sandbox.
        warm = await ctx.cache[with_input._PREPARED][1]
        assert warm.proc.returncode is None
        users = b"the user's line\n"
        (root / "u.txt").write_bytes(users)  # made while the sandbox waited
        # Before the command starts by the file system's clock (coarse: a few ms per tick; a
        # change in the command's first tick is a concurrent one, in any sandbox).
        await asyncio.sleep(0.1)
        command = "cat > got.json; cat u.txt > seen.txt; echo hook >> u.txt; exit 3"
        done = await with_input.run_with_input(command, b'{"x": 1}', 10_000, ctx)
        assert warm.proc.returncode is not None  # it ran there
        assert done.returncode == 3
        assert (root / "got.json").read_bytes() == b'{"x": 1}'
        assert (root / "seen.txt").read_bytes() == users
        assert (root / "u.txt").read_bytes() == users + b"hook\n"
        changes = {c.path: c for c in done.files_changed}
        assert set(changes) == {"got.json", "seen.txt", "u.txt"}
        assert changes["u.txt"].before == hashlib.sha256(users).hexdigest()
        assert changes["u.txt"].outcome == "direct"
        await with_input.release(ctx.cache)

    asyncio.run(go())
    assert os.listdir(tx_root(root)) == []  # the prepared transaction is gone too
