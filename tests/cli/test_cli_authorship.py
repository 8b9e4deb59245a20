"""No user byte is lost by a rewind or a checkout: the session's own content is the base of every
restoration, never a merge result or an observation that holds the user's bytes (issue 30).

Each test is a reproduction a user ran on a real repository with the scripted provider."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from cli_helpers import Cli, script, text, tool, turn

USER = "# USER LINE\n"


def _nodes(cli: Cli, sid: str) -> list[str]:
    return [n["id"] for n in cli("tree", sid, "--json").json_lines()[0]["nodes"]]


def _run(cli: Cli, path: Path, *turns: dict, sid: str | None = None) -> str:
    s = script(path, *turns)
    if sid is None:
        r, sid = cli.run_script("go", s)
    else:
        r = cli("run", "go", "--session", sid, "--script", s)
    assert r.code == 0, r.out + r.err
    return sid


def _append(path: Path, line: str = USER) -> None:
    with path.open("a") as f:
        f.write(line)


def _outcomes(out: str) -> dict[str, str]:
    found = {}
    for line in out.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] in ("restored", "merged", "conflict", "unchanged"):
            found[words[1]] = words[0]
    return found


def test_a_second_rewind_keeps_the_users_line(cli: Cli, repo: Path, tmp_path: Path) -> None:
    (repo / "v.py").write_text("one = 1\ntwo = 2\nthree = 3\nfour = 4\n")
    sid = _run(
        cli,
        tmp_path / "t1.json",
        turn(tool("read", path="v.py")),
        turn(tool("edit", path="v.py", old_string="one = 1", new_string="one = 10")),
        turn(text("done")),
    )
    end_of_turn_1 = _nodes(cli, sid)[-1]
    _run(
        cli,
        tmp_path / "t2.json",
        turn(tool("edit", path="v.py", old_string="two = 2", new_string="two = 20")),
        turn(text("done")),
        sid=sid,
    )
    _append(repo / "v.py")
    r = cli("rewind", sid, end_of_turn_1)
    assert r.code == 0, r.out
    assert _outcomes(r.out)["v.py"] == "merged"
    assert (repo / "v.py").read_text() == "one = 10\ntwo = 2\nthree = 3\nfour = 4\n" + USER
    first = _nodes(cli, sid)[0]
    r = cli("rewind", sid, first)
    assert r.code == 0, r.out
    assert (repo / "v.py").read_text() == "one = 1\ntwo = 2\nthree = 3\nfour = 4\n" + USER


def _read_edit_then(cli: Cli, repo: Path, tmp_path: Path, *second: dict) -> str:
    (repo / "a.py").write_text("a = 1\nb = 2\nc = 3\nd = 4\n")
    sid = _run(
        cli,
        tmp_path / "t1.json",
        turn(tool("read", path="a.py")),
        turn(tool("edit", path="a.py", old_string="a = 1", new_string="a = 100")),
        turn(text("done")),
    )
    _append(repo / "a.py")
    _run(cli, tmp_path / "t2.json", *second, turn(text("done")), sid=sid)
    r = cli("rewind", sid, _nodes(cli, sid)[0])
    assert r.code == 0, r.out
    assert (repo / "a.py").read_text() == "a = 1\nb = 2\nc = 3\nd = 4\n" + USER
    return sid


def test_a_later_turn_on_another_file_does_not_take_the_users_line(
    cli: Cli, repo: Path, tmp_path: Path
) -> None:
    _read_edit_then(cli, repo, tmp_path, turn(tool("write", path="other.txt", content="x\n")))


def test_a_later_read_does_not_take_the_users_line(cli: Cli, repo: Path, tmp_path: Path) -> None:
    _read_edit_then(cli, repo, tmp_path, turn(tool("read", path="a.py")))


def _sleeping_in(repo: Path) -> bool:
    """Whether a command's ``sleep`` runs in ``repo`` (its process, seen in /proc: its working
    directory is the workspace, which the sandbox mounts at the same path)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if (proc / "cmdline").read_bytes().split(b"\0")[0] != b"sleep":
                continue
            if os.readlink(proc / "cwd") == str(repo):
                return True
        except OSError:
            continue
    return False


def _when_the_command_runs(repo: Path, then: callable) -> threading.Thread:  # type: ignore[valid-type]
    """Run ``then`` while the command sleeps (its ``sleep`` process runs in the workspace): the
    user's write lands during the command, whatever the load. A transaction directory is not
    enough of a sign: the sandbox probe's comes and goes before the command's begins."""

    def wait() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if _sleeping_in(repo):
                then()
                return
            time.sleep(0.02)

    t = threading.Thread(target=wait, daemon=True)
    t.start()
    return t


def test_a_command_merged_with_the_users_concurrent_line_is_rewound_without_losing_it(
    cli: Cli, repo: Path, tmp_path: Path
) -> None:
    (repo / "app.py").write_text("x = 1\ny = 2\nz = 3\nw = 4\n")
    t = _when_the_command_runs(repo, lambda: _append(repo / "app.py"))
    sid = _run(
        cli,
        tmp_path / "t1.json",
        turn(tool("read", path="app.py")),
        turn(tool("bash", command="sleep 1.6; sed -i 's/x = 1/x = 2/' app.py")),
        turn(text("done")),
    )
    t.join()
    assert (repo / "app.py").read_text() == "x = 2\ny = 2\nz = 3\nw = 4\n" + USER
    dbg = cli("show", sid, "--json").out
    r = cli("rewind", sid, _nodes(cli, sid)[0])
    assert r.code == 0, r.out
    assert (repo / "app.py").read_text() == "x = 1\ny = 2\nz = 3\nw = 4\n" + USER, dbg + r.out


def _conflicting_append(
    cli: Cli, repo: Path, tmp_path: Path, *, seen: bool = True
) -> tuple[str, str]:
    (repo / "notes.txt").write_text("first\n")
    first = tool("read", path="notes.txt") if seen else tool("read", path="notes.md")
    sid = _run(cli, tmp_path / "t0.json", turn(first), turn(text("ok")))
    t = _when_the_command_runs(repo, lambda: _append(repo / "notes.txt"))
    s = script(
        tmp_path / "t1.json",
        turn(tool("bash", command="sleep 1.6; echo agent >> notes.txt")),
        turn(text("done")),
    )
    r = cli("run", "go", "--session", sid, "--script", s)
    t.join()
    assert (repo / "notes.txt").read_text() == "first\n" + USER
    return sid, r.out + r.err


@pytest.mark.parametrize("seen", [True, False])
def test_a_commands_conflict_then_a_rewind_keeps_the_users_line(
    cli: Cli, repo: Path, tmp_path: Path, seen: bool
) -> None:
    sid, _out = _conflicting_append(cli, repo, tmp_path, seen=seen)
    r = cli("rewind", sid, _nodes(cli, sid)[0])
    assert r.code == 0, r.out
    assert (repo / "notes.txt").read_text() == "first\n" + USER


def test_after_a_conflicted_rewind_a_later_turn_and_a_rewind_keep_the_users_version(
    cli: Cli, repo: Path, tmp_path: Path
) -> None:
    (repo / "d.py").write_text("p = 1\nq = 2\n")
    sid = _run(
        cli,
        tmp_path / "t1.json",
        turn(tool("read", path="d.py")),
        turn(tool("edit", path="d.py", old_string="p = 1", new_string="p = 5")),
        turn(text("done")),
    )
    (repo / "d.py").write_text("p = USER\nq = 2\n")  # overlaps the agent's line
    first = _nodes(cli, sid)[0]
    r = cli("rewind", sid, first)
    assert r.code == 1 and _outcomes(r.out)["d.py"] == "conflict"
    assert (repo / "d.py").read_text() == "p = USER\nq = 2\n"
    _run(cli, tmp_path / "t2.json", turn(tool("read", path="notes.md")), turn(text("ok")), sid=sid)
    r = cli("rewind", sid, first)
    assert (repo / "d.py").read_text() == "p = USER\nq = 2\n", r.out


def test_taking_the_sessions_version_after_a_conflict_resolves_it(
    cli: Cli, repo: Path, tmp_path: Path
) -> None:
    (repo / "d.py").write_text("p = 1\nq = 2\n")
    sid = _run(
        cli,
        tmp_path / "t1.json",
        turn(tool("read", path="d.py")),
        turn(tool("edit", path="d.py", old_string="p = 1", new_string="p = 5")),
        turn(text("done")),
    )
    later = _nodes(cli, sid)[-1]
    (repo / "d.py").write_text("p = USER\nq = 2\n")
    first = _nodes(cli, sid)[0]
    r = cli("rewind", sid, first)
    assert r.code == 1
    # The suggested command: the disk now holds the session's version at the first node.
    (repo / "d.py").write_text(cli("show", sid, first, "d.py").out)
    assert (repo / "d.py").read_text() == "p = 1\nq = 2\n"
    r = cli("checkout", sid, later)
    assert r.code == 0, r.out
    assert (repo / "d.py").read_text() == "p = 5\nq = 2\n"
    r = cli("checkout", sid, first)
    assert r.code == 0, r.out
    assert (repo / "d.py").read_text() == "p = 1\nq = 2\n"


def test_run_exits_1_after_a_conflict_and_names_a_commands_conflict(
    cli: Cli, repo: Path, tmp_path: Path
) -> None:
    (repo / "notes.txt").write_text("first\n")
    sid = _run(cli, tmp_path / "t0.json", turn(tool("read", path="notes.txt")), turn(text("ok")))
    t = _when_the_command_runs(repo, lambda: _append(repo / "notes.txt"))
    s = script(
        tmp_path / "t1.json",
        turn(tool("bash", command="sleep 1.6; echo agent >> notes.txt")),
        turn(text("done")),
    )
    r = cli("run", "go", "--session", sid, "--script", s)
    t.join()
    assert r.code == 1, r.out + r.err
    hint = [line for line in (r.out + r.err).splitlines() if line.startswith("conflict notes.txt")]
    assert hint, r.out + r.err
    command = hint[0].split("Take it: ")[1]
    node = command.split()[3]
    shown = cli("show", sid, node, "notes.txt", "--proposed")
    # The command's version (the overlay saw the user's line if it came before the append).
    assert shown.code == 0 and shown.out.startswith("first\n") and shown.out.endswith("agent\n")


def test_run_exits_1_after_an_edit_conflict(cli: Cli, repo: Path, tmp_path: Path) -> None:
    sid = _run(cli, tmp_path / "t0.json", turn(tool("read", path="notes.md")), turn(text("ok")))
    (repo / "notes.md").write_text("a\nUSER\nc\n")
    s = script(
        tmp_path / "t1.json",
        turn(tool("edit", path="notes.md", old_string="b\n", new_string="AGENT\n")),
        turn(text("ok")),
    )
    r = cli("run", "change b", "--session", sid, "--script", s)
    assert r.code == 1, r.out + r.err


def test_a_nodes_files_are_what_the_session_did_there(cli: Cli, repo: Path, tmp_path: Path) -> None:
    sid = _run(cli, tmp_path / "t0.json", turn(tool("read", path="notes.md")), turn(text("ok")))
    (repo / "notes.md").write_text("a\nUSER\nc\n")
    s = script(
        tmp_path / "t1.json",
        turn(tool("edit", path="notes.md", old_string="b\n", new_string="AGENT\n")),
        turn(text("ok")),
    )
    cli("run", "change b", "--session", sid, "--script", s)
    _append(repo / "notes.md", "typed later\n")
    tree = cli("tree", sid, "--json").json_lines()[0]["nodes"]
    for n in tree:
        assert "notes.md" not in n["files_changed"], n  # no node of the session changed it
    for n in tree:
        shown = cli("show", sid, n["id"], "notes.md")
        assert "typed later" not in shown.out and "USER" not in shown.out
    # Where a node's bytes come from is named: the user's disk when the session first read it.
    shown = cli("show", sid, tree[-1]["id"], "notes.md")
    assert "the user's disk" in shown.err
    data = cli("tree", sid, "--json").json_lines()[0]
    entry = [f for f in data.get("files_at_start", []) if f["path"] == "notes.md"]
    assert entry and entry[0]["author"] == "user"


def test_show_and_tree_name_whose_bytes_a_file_holds_at_each_node(
    cli: Cli, repo: Path, tmp_path: Path
) -> None:
    """Issue 30.5: for a file at a node, ``show`` (its stderr note, and ``--json``) and ``tree
    --json`` say the same thing: the session's bytes, or the user's disk (when the session
    first saw the file, or when it took the user's version into its own at a node)."""
    (repo / "a.py").write_text("x = 1\ny = 2\n")
    sid = _run(cli, tmp_path / "t0.json", turn(tool("read", path="a.py")), turn(text("ok")))
    _append(repo / "a.py")  # the agent reads it again and edits it: its edit takes the line
    _run(
        cli,
        tmp_path / "t1.json",
        turn(tool("read", path="a.py")),
        turn(tool("edit", path="a.py", old_string="x = 1", new_string="x = 10")),
        turn(text("ok")),
        sid=sid,
    )
    data = cli("tree", sid, "--json").json_lines()[0]
    start = [f for f in data["files_at_start"] if f["path"] == "a.py"]
    assert start == [{"path": "a.py", "hash": start[0]["hash"], "author": "user"}]
    origin: tuple[str, str | None] = ("user", None)
    seen = []
    for n in data["nodes"]:
        entry = [f for f in n["files"] if f["path"] == "a.py"]
        if entry:
            origin = (entry[0]["author"], n["id"])
        shown = cli("show", sid, n["id"], "a.py", "--json")
        assert shown.code == 0, shown.err
        record = shown.json_lines()[0]
        assert (record["author"], record["recorded_at"]) == origin, (n, record)
        plain = cli("show", sid, n["id"], "a.py")
        assert plain.out == record["text"]
        if record["author"] == "user":
            assert "the user's disk" in plain.err, plain.err
            where = "took it at node" if origin[1] else "first saw it"
            assert where in plain.err, plain.err
        else:
            assert plain.err == "", plain.err
        seen.append(origin)
    # All three origins occur: the first sight, the user's version the edit took, the edit.
    assert ("user", None) in seen
    assert any(a == "user" and at is not None for a, at in seen), seen
    assert any(a == "session" for a, _ in seen), seen
    took = next(at for a, at in seen if a == "user" and at is not None)
    assert USER in cli("show", sid, took, "a.py").out
    last = cli("show", sid, data["nodes"][-1]["id"], "a.py", "--json").json_lines()[0]
    assert last["author"] == "session" and last["text"].startswith("x = 10\n")
    # The version a conflict left unapplied is the session's own.
    proposed = cli("show", sid, data["nodes"][-1]["id"], "a.py", "--proposed", "--json")
    assert proposed.code == 2 and "conflict" in (proposed.out + proposed.err).lower()
