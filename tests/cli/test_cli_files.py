"""``diff`` shows what changed in files between two nodes; ``show`` prints a file at a node; a
conflict tells the user where the agent's version is and how to take it."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import Cli, git, script, text, tool, turn


def _edited_session(cli: Cli, tmp_path: Path) -> tuple[str, str, str]:
    """A session that edits notes.md and creates new.txt: (session, first node, last node)."""
    s = script(
        tmp_path / "s.json",
        turn(tool("read", path="notes.md")),
        turn(tool("edit", path="notes.md", old_string="b\n", new_string="B [bold]x[/bold]\n")),
        turn(tool("write", path="new.txt", content="fresh\n")),
        turn(text("done")),
    )
    r, sid = cli.run_script("edit", s)
    assert r.code == 0, r.err
    nodes = [n["id"] for n in cli("tree", sid, "--json").json_lines()[0]["nodes"]]
    return sid, nodes[0], nodes[-1]


def test_diff_shows_unified_diffs_stat_names_and_json(cli: Cli, repo: Path, tmp_path: Path) -> None:
    sid, first, last = _edited_session(cli, tmp_path)
    r = cli("diff", sid, first, last)
    assert r.code == 0
    assert "--- a/notes.md\n+++ b/notes.md\n" in r.out
    assert "-b\n+B [bold]x[/bold]\n" in r.out
    assert "--- /dev/null\n+++ b/new.txt\n" in r.out and "+fresh\n" in r.out
    assert "1f2de147" not in r.out

    # The patch applies to the files as they were at the first node and gives the last.
    git(repo, "stash", "-u", "-q")
    patch = tmp_path / "p.diff"
    patch.write_text(r.out)
    git(repo, "apply", str(patch))
    assert (repo / "notes.md").read_text() == "a\nB [bold]x[/bold]\nc\n"
    assert (repo / "new.txt").read_text() == "fresh\n"

    assert cli("diff", sid, first, last, "--name-only").out.splitlines() == ["new.txt", "notes.md"]
    stat = cli("diff", sid, first, last, "--stat").out.splitlines()
    assert stat[0].split() == ["new.txt", "|", "1", "+"]
    assert stat[1].split() == ["notes.md", "|", "2", "+-"]
    assert "2 file(s) changed, 2 insertion(s)(+), 1 deletion(s)(-)" in stat[2]
    data = cli("diff", sid, first, last, "--json").json_lines()[0]
    by_path = {f["path"]: f for f in data["files"]}
    assert by_path["new.txt"]["status"] == "added" and by_path["new.txt"]["a"] is None
    assert by_path["notes.md"]["patch"].startswith("--- a/notes.md")
    assert (by_path["notes.md"]["added"], by_path["notes.md"]["removed"]) == (1, 1)
    with pytest.raises(SystemExit) as exit_:
        cli("diff", sid, first, last, "--stat", "--json")
    assert exit_.value.code == 2


def test_show_prints_a_file_as_it_was_at_a_node(cli: Cli, repo: Path, tmp_path: Path) -> None:
    sid, first, last = _edited_session(cli, tmp_path)
    assert cli("show", sid, first, "notes.md").out == "a\nb\nc\n"
    assert cli("show", sid, last, "notes.md").out == "a\nB [bold]x[/bold]\nc\n"
    assert cli("show", sid, "HEAD", str(repo / "new.txt")).out == "fresh\n"
    r = cli("show", sid, first, "new.txt")
    assert r.code == 2 and f"new.txt did not exist at node {first}" in r.err
    r = cli("show", sid, last, "src/app.py")
    assert r.code == 2 and "never saw src/app.py" in r.err
    r = cli("show", sid, "nope", "notes.md")
    assert r.code == 2 and "no unique node or label matches 'nope'" in r.err
    assert cli("show", sid, last).code == 0  # without a path: that node, whole (issue 35)
    assert cli("show", sid).code == 0  # the events, as before


def test_a_conflict_shows_how_to_take_the_agents_version(
    cli: Cli, repo: Path, tmp_path: Path
) -> None:
    s1 = script(tmp_path / "s1.json", turn(tool("read", path="notes.md")), turn(text("seen")))
    r, sid = cli.run_script("look", s1)
    assert r.code == 0
    (repo / "notes.md").write_text("a\nUSER\nc\n")  # the user edits the same line meanwhile
    s2 = script(
        tmp_path / "s2.json",
        turn(tool("edit", path="notes.md", old_string="b\n", new_string="AGENT\n")),
        turn(text("ok")),
    )
    r = cli("run", "change b", "--session", sid, "--script", s2)
    assert (repo / "notes.md").read_text() == "a\nUSER\nc\n"  # the user's file stays
    hint = [line for line in r.err.splitlines() if line.startswith("conflict notes.md")]
    assert hint, r.err
    command = hint[0].split("Take it: ")[1]
    assert command.startswith(f"coder-es show {sid[:8]} ") and command.endswith(
        " notes.md --proposed > notes.md"
    )
    node = command.split()[3]
    shown = cli("show", sid, node, "notes.md", "--proposed")
    assert (shown.code, shown.out) == (0, "a\nAGENT\nc\n")
    r = cli("show", sid, node, "src/app.py", "--proposed")
    assert r.code == 2 and "no conflicted edit of src/app.py" in r.err


def test_a_restoration_conflict_names_the_command_that_takes_the_sessions_version(
    cli: Cli, repo: Path, tmp_path: Path
) -> None:
    sid, first, _last = _edited_session(cli, tmp_path)
    (repo / "notes.md").write_text("a\nmine\nc\n")  # the user rewrites the line the agent edited
    r = cli("rewind", sid, first)
    assert r.code == 1
    assert (repo / "notes.md").read_text() == "a\nmine\nc\n"
    take = [line for line in r.out.splitlines() if "take the session's notes.md" in line]
    assert take == [
        f"  take the session's notes.md: coder-es show {sid[:8]} {first} notes.md > notes.md"
    ]
    assert cli("show", sid[:8], first, "notes.md").out == "a\nb\nc\n"
