"""bash (process groups, timeouts, cancellation, change detection), grep and find."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from processes import gone

from coder_es.tools.base import ToolCall, ToolContext, ToolResult
from coder_es.tools.registry import LocalExecutor, default_registry

Make = Callable[..., ToolContext]


def run(tool_name: str, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    executor = LocalExecutor(default_registry())
    return asyncio.run(executor.execute(ToolCall(ctx.tool_use_id, tool_name, args), ctx))


def test_bash_captures_both_streams_and_the_exit_code(make_ctx: Make) -> None:
    res = run("bash", {"command": "echo out; echo err >&2; exit 3"}, make_ctx())
    assert res.is_error
    assert res.output == "out\n[stderr]\nerr\n[exit code 3]"


def test_bash_reports_the_files_a_command_changed(make_ctx: Make, repo: Path) -> None:
    ctx = make_ctx()
    res = run(
        "bash", {"command": "echo hi > made.txt && rm src/util.py && echo x >> README.md"}, ctx
    )
    assert not res.is_error
    kinds = {c.path: (c.before is None, c.after is None) for c in res.files_changed}
    assert kinds == {
        "made.txt": (True, False),
        "src/util.py": (False, True),
        "README.md": (False, False),
    }
    # A user's change between two commands is not blamed on the next command.
    (repo / "src/app.py").write_text("changed by the user\n")
    again = run("bash", {"command": "true"}, ctx)
    assert again.files_changed == ()


def test_bash_timeout_kills_the_whole_process_group(make_ctx: Make, tmp_path: Path) -> None:
    started = time.monotonic()
    marker = f"sleep 30.{os.getpid()}1"
    res = run("bash", {"command": f"{marker} & wait", "timeout_ms": 300}, make_ctx())
    assert time.monotonic() - started < 10
    assert res.is_error and "timed out after 300 ms" in res.output
    assert gone(marker)


def test_cancelling_bash_kills_its_process_group(make_ctx: Make, tmp_path: Path) -> None:
    ctx = make_ctx()
    # The flag is outside the workspace: a writable place of the sandbox.
    ctx = make_ctx(sandbox=dataclasses.replace(ctx.sandbox, writable=(tmp_path,)))
    executor = LocalExecutor(default_registry())
    marker = f"sleep 30.{os.getpid()}2"
    flag = tmp_path / "started"

    async def scenario() -> None:
        command = f"{marker} & touch {flag}; wait"
        task = asyncio.create_task(
            executor.execute(ToolCall("t1", "bash", {"command": command}), ctx)
        )
        while not flag.exists():
            await asyncio.sleep(0.02)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        else:  # pragma: no cover
            raise AssertionError("the cancellation was swallowed")

    asyncio.run(scenario())
    assert ctx.cancelled.is_set()
    assert gone(marker)


def test_grep_respects_gitignore_and_options(make_ctx: Make) -> None:
    out = run("grep", {"pattern": "hello"}, make_ctx()).output
    assert out.splitlines() == ["README.md:2: hello world", "src/app.py:2:     return 'hello'"]
    assert (
        "src/util.py:1: HELLO = 1"
        in run("grep", {"pattern": "^hello", "ignore_case": True, "path": "src"}, make_ctx()).output
    )
    limited = run("grep", {"pattern": "hello", "max_results": 1}, make_ctx()).output
    assert "stopped at 1 matches" in limited
    bad = run("grep", {"pattern": "("}, make_ctx())
    assert bad.is_error and "invalid regular expression" in bad.output


def test_find_matches_names_at_any_depth_or_whole_paths(make_ctx: Make) -> None:
    assert run("find", {"pattern": "*.py"}, make_ctx()).output == "src/app.py\nsrc/util.py"
    assert run("find", {"pattern": "src/a*.py"}, make_ctx()).output == "src/app.py"
    assert run("find", {"pattern": "*.log"}, make_ctx()).output.startswith("No files match")
    assert "1 more" in run("find", {"pattern": "*", "max_results": 3}, make_ctx()).output
