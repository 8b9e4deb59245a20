"""``coder-es tree`` into a pipe prints without rich (start-up time), exactly what rich prints,
and every line whole: a program reading the pipe must not find lines cut at some width."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import Cli, run_process, script, text, tool, turn

HOSTILE_NAME = "[bold]b\\ 中文 x.txt"
MESSAGES = [
    "[red]not markup[/red] ends in a backslash \\",
    "wide 中文字符 🎉 " * 12,
    "a bell\x07 and [link=http://x]y[/link] \\[z]",
]


@pytest.mark.parametrize("columns", [None, "30", "200"])
def test_tree_in_a_pipe_prints_what_rich_prints(
    cli: Cli, repo: Path, tmp_path: Path, columns: str | None
) -> None:
    s = script(
        tmp_path / "s.json",
        turn(tool("write", path=HOSTILE_NAME, content="x\n")),
        turn(*(text(m) for m in MESSAGES[1:])),
    )
    assert cli("run", MESSAGES[0], "--script", s).code == 0
    sid = cli("sessions", "--json").json_lines()[0]["id"]
    env = {"COLUMNS": columns} if columns else {}
    fast = run_process(["tree", sid[:8]], repo, **env)
    # TTY_COMPATIBLE=0: rich itself decides the output is plain (and prints it).
    by_rich = run_process(["tree", sid[:8]], repo, TTY_COMPATIBLE="0", **env)
    assert fast.code == by_rich.code == 0, fast.err + by_rich.err
    assert fast.out == by_rich.out
    assert "b\\ 中文" in fast.out and "backslash \\\\\n" in fast.out, fast.out
    # Whole lines whatever COLUMNS says (a node's text is a summary; `show S NODE` has it all).
    assert max(len(line) for line in fast.out.splitlines()) > 80
