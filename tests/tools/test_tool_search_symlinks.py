"""grep and find never reach outside the workspace through a symlink (issue 17, point 5)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coder_es.tools.base import ToolCall, ToolContext, ToolResult
from coder_es.tools.registry import LocalExecutor, default_registry

Make = Callable[..., ToolContext]
SECRET = "TOPSECRET-4242"


def run(tool_name: str, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    executor = LocalExecutor(default_registry())
    return asyncio.run(executor.execute(ToolCall(ctx.tool_use_id, tool_name, args), ctx))


def outside_dir(repo: Path) -> Path:
    outside = repo.parent / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(f"{SECRET}\n")
    return outside


def test_grep_does_not_read_a_file_outside_through_a_symlink(make_ctx: Make, repo: Path) -> None:
    outside = outside_dir(repo)
    (repo / "leak.txt").symlink_to(outside / "secret.txt")
    res = run("grep", {"pattern": SECRET}, make_ctx())
    assert SECRET not in res.output
    assert "leak.txt" not in res.output


def test_grep_and_find_do_not_descend_a_symlinked_directory_outside(
    make_ctx: Make, repo: Path
) -> None:
    outside = outside_dir(repo)
    (repo / "src" / "ext").symlink_to(outside, target_is_directory=True)
    assert SECRET not in run("grep", {"pattern": SECRET}, make_ctx()).output
    assert "secret.txt" not in run("find", {"pattern": "*.txt"}, make_ctx()).output
    # Naming the link as the search root is an outside path: refused, not followed.
    res = run("grep", {"pattern": SECRET, "path": "src/ext"}, make_ctx(outside_ok=True))
    assert SECRET not in res.output


def test_a_symlink_inside_the_workspace_is_still_searched(make_ctx: Make, repo: Path) -> None:
    (repo / "alias.py").symlink_to("src/util.py")
    assert "alias.py:1: HELLO = 1" in run("grep", {"pattern": "HELLO"}, make_ctx()).output
    assert "alias.py" in run("find", {"pattern": "*.py"}, make_ctx()).output


def test_symlink_loops_terminate(make_ctx: Make, repo: Path) -> None:
    (repo / "loop_a").symlink_to("loop_b")
    (repo / "loop_b").symlink_to("loop_a")
    (repo / "src" / "self").symlink_to("..", target_is_directory=True)
    (repo / "src" / "up").symlink_to(repo, target_is_directory=True)
    res = run("grep", {"pattern": "HELLO"}, make_ctx())
    assert res.output.splitlines() == ["src/util.py:1: HELLO = 1"]
    assert run("find", {"pattern": "loop_*"}, make_ctx()).output.startswith("No files match")
