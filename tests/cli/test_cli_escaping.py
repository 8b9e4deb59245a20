"""Texts from the model, a tool or a file are shown as they are, never read as rich markup."""

from __future__ import annotations

from pathlib import Path

from cli_helpers import Cli, script, text, tool, turn


def test_a_failed_command_shows_its_reason(cli: Cli, tmp_path: Path) -> None:
    s = script(
        tmp_path / "s.json", turn(tool("bash", command="ls nonexistent_dir")), turn(text("ok"))
    )
    r = cli("run", "look", "--script", s)
    assert r.code == 0
    failed = [line for line in r.err.splitlines() if "✗ bash" in line]
    assert failed, r.err
    assert "[stderr]" in failed[0] and "nonexistent_dir" in failed[0]


def test_markup_in_commands_outputs_and_titles_is_shown_verbatim(cli: Cli, tmp_path: Path) -> None:
    name = "[bold]x[/bold].txt"
    s = script(
        tmp_path / "s.json",
        turn(tool("bash", command=f"echo '{name}'")),
        turn(tool("read", path="[red]missing[/red]")),
        turn(text("[bold]done[/bold] [link=http://x]y[/link]")),
    )
    r = cli("run", "make [italic]it[/italic]", "--script", s)
    assert r.code == 0, r.err
    assert f"▶ bash echo '{name}'" in r.err  # the command as the model wrote it
    assert f"✓ bash {name}" in r.err  # its output
    assert "[red]missing[/red]" in r.err  # the tool's error names the path as given
    assert "[bold]done[/bold] [link=http://x]y[/link]" in r.out
    sid = cli("sessions", "--json").json_lines()[0]["id"]
    listing = cli("sessions")
    assert "make [italic]it[/italic]" in listing.out
    tree = cli("tree", sid)
    assert "[bold]done[/bold]" in tree.out and name in tree.out
    shown = cli("show", sid)
    assert "make [italic]it[/italic]" in shown.out
