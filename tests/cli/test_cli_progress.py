"""Progress bars appear on a terminal, and never in pipes, files or --json output."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
from pathlib import Path

from cli_helpers import Cli, script, subprocess_env, text, tool, turn
from rich.console import Console

from coder_es.cli.progress import bars, shown, working


def _session_with_many_files(cli: Cli, tmp_path: Path) -> tuple[str, str, str]:
    s = script(
        tmp_path / "s.json",
        turn(tool("bash", command="for i in $(seq 80); do echo $i > f$i.txt; done")),
        turn(text("made them")),
    )
    r, sid = cli.run_script("many", s)
    assert r.code == 0, r.err
    nodes = [n["id"] for n in cli("tree", sid, "--json").json_lines()[0]["nodes"]]
    return sid, nodes[0], nodes[-1]


def _stderr_on_a_terminal(args: list[str], cwd: Path) -> tuple[int, bytes]:
    """Run the command with standard error on a pseudo-terminal; everything written there."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "coder_es.cli.main", *args],
        cwd=cwd,
        env=subprocess_env(TERM="xterm-256color", COLUMNS="120"),
        stdout=subprocess.PIPE,
        stderr=follower,
    )
    os.close(follower)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the process closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    proc.communicate(timeout=120)
    os.close(leader)
    return proc.returncode, seen


def test_a_rewind_of_many_files_shows_a_bar_on_a_terminal_only(
    cli: Cli, repo: Path, tmp_path: Path
) -> None:
    sid, first, last = _session_with_many_files(cli, tmp_path)
    code, terminal = _stderr_on_a_terminal(["rewind", sid, first], repo)
    assert code == 0
    assert b"restoring files" in terminal and b"80/80" in terminal
    assert not (repo / "f1.txt").exists()

    # Not a terminal (captured here): the same commands draw nothing.
    piped = cli("checkout", sid, last)
    assert piped.code == 0 and (repo / "f1.txt").exists()
    assert piped.err == "" and "\x1b" not in piped.out and "restoring files" not in piped.out
    as_json = cli("rewind", sid, first, "--json")
    assert as_json.code == 0 and as_json.err == ""


def test_verify_all_shows_a_spinner_on_a_terminal_only(
    cli: Cli, repo: Path, tmp_path: Path
) -> None:
    _session_with_many_files(cli, tmp_path)
    code, terminal = _stderr_on_a_terminal(["verify", "--all"], repo)
    assert code == 0 and b"verifying every chain and blob" in terminal
    piped = cli("verify", "--all")
    assert piped.code == 0 and piped.err == "" and "\x1b" not in piped.out


def test_a_running_tool_shows_a_spinner_on_a_terminal_only(
    cli: Cli, repo: Path, tmp_path: Path
) -> None:
    s = script(tmp_path / "s.json", turn(tool("bash", command="sleep 1")), turn(text("slept")))
    code, terminal = _stderr_on_a_terminal(["run", "wait", "--script", s], repo)
    assert code == 0 and b"running bash" in terminal
    piped = cli("run", "wait", "--script", s)
    assert piped.code == 0 and "running bash" not in piped.err and "\x1b" not in piped.err


def test_progress_is_drawn_only_for_a_terminal_without_json() -> None:
    assert not shown(stream=io.StringIO())
    terminal = Console(file=io.StringIO(), force_terminal=True, width=100)
    with bars(True, console=terminal) as bar:
        report = bar("restoring files", 10)
        report(3, 5)  # below the minimum: nothing
        report2 = bar("replaying", 1)
        for done in range(1, 4):
            report2(done, 3)
    drawn = terminal.file.getvalue()  # type: ignore[attr-defined]
    assert "replaying" in drawn and "3/3" in drawn and "restoring files" not in drawn
    with working("verifying", True, console=terminal):
        pass
    assert "verifying" in terminal.file.getvalue()  # type: ignore[attr-defined]
    quiet = Console(file=io.StringIO(), force_terminal=True)
    with bars(False, console=quiet) as bar:
        bar("x")(1, 1)
    with working("y", False, console=quiet):
        pass
    assert quiet.file.getvalue() == ""  # type: ignore[attr-defined]
