"""read / write / edit / restore: what the agent is told, what the disk holds, what is recorded."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from coder_es.domain.session import Session
from coder_es.store.blobs import MemoryBlobStore
from coder_es.workspace import FileChange, Workspace


def edits(session: Session) -> list[Session.EditApplied]:
    return [e for e in session.collect_events() if isinstance(e, Session.EditApplied)]


def all_events(session: Session) -> list[object]:
    return list(session.collect_events())


FIVE = "one\ntwo\nthree\nfour\nfive\n"


def test_read_snapshots_the_file_and_records_it(
    ws: Workspace, root: Path, session: Session, blobs: MemoryBlobStore
) -> None:
    (root / "a.txt").write_text(FIVE)
    r = ws.read("a.txt", tool_use_id="t1")
    assert r.exists and r.text == FIVE and r.size == len(FIVE)
    assert blobs.get(r.hash or "") == FIVE.encode()
    (obs,) = [e for e in session.collect_events() if isinstance(e, Session.FileObserved)]
    assert (obs.path, obs.hash, obs.size, obs.tool_use_id) == ("a.txt", r.hash, len(FIVE), "t1")
    assert ws.view("a.txt") == r.hash


def test_reading_a_missing_file_records_that_it_is_absent(ws: Workspace) -> None:
    r = ws.read("nope.txt")
    assert not r.exists
    assert ws.has_view("nope.txt") and ws.view("nope.txt") is None


def test_writing_an_unread_existing_file_is_refused(
    ws: Workspace, root: Path, session: Session
) -> None:
    (root / "a.txt").write_text(FIVE)
    result = ws.write("a.txt", "replaced\n")
    assert result.outcome == "error" and "read it first" in result.message_for_agent
    assert (root / "a.txt").read_text() == FIVE
    (event,) = edits(session)
    assert event.outcome == "error" and event.result == event.disk


def test_writing_a_new_file_creates_it_with_parents(ws: Workspace, root: Path) -> None:
    result = ws.write("src/pkg/new.py", "x = 1\n")
    assert result.outcome == "direct" and result.message_for_agent == "Created src/pkg/new.py"
    assert (root / "src/pkg/new.py").read_text() == "x = 1\n"
    assert result.as_file_change() == {
        "path": "src/pkg/new.py",
        "before": None,
        "after": result.result,
    }


def test_edit_applies_to_the_view_and_writes_directly_when_disk_is_unchanged(
    ws: Workspace, root: Path, session: Session, blobs: MemoryBlobStore
) -> None:
    (root / "a.txt").write_text(FIVE)
    seen = ws.read("a.txt").hash
    result = ws.edit("a.txt", "three", "THREE", tool_use_id="t2")
    assert result.outcome == "direct" and result.ok
    assert (root / "a.txt").read_text() == FIVE.replace("three", "THREE")
    assert "-three\n+THREE\n" in result.diff
    (event,) = edits(session)
    assert (event.base, event.disk, event.outcome, event.tool_use_id) == (
        seen,
        seen,
        "direct",
        "t2",
    )
    assert blobs.get(event.proposed or "") == blobs.get(event.result or "")
    assert ws.view("a.txt") == event.result


def test_concurrent_user_edit_is_merged_and_kept(
    ws: Workspace, root: Path, session: Session
) -> None:
    (root / "a.txt").write_text(FIVE)
    ws.read("a.txt")
    (root / "a.txt").write_text(FIVE.replace("one", "ONE by user"))
    result = ws.edit("a.txt", "four", "FOUR")
    assert result.outcome == "merged"
    assert (root / "a.txt").read_text() == "ONE by user\ntwo\nthree\nFOUR\nfive\n"
    assert "edits were kept" in result.message_for_agent
    assert "+ONE by user" in result.message_for_agent
    (event,) = edits(session)
    assert event.outcome == "merged" and event.base != event.disk != event.result


def test_overlapping_edit_leaves_the_users_file_and_returns_the_conflict(
    ws: Workspace, root: Path, session: Session
) -> None:
    (root / "a.txt").write_text(FIVE)
    seen = ws.read("a.txt").hash
    user = FIVE.replace("three", "three (user)")
    (root / "a.txt").write_text(user)
    result = ws.edit("a.txt", "three", "three (agent)")
    assert result.outcome == "conflict" and not result.ok
    assert (root / "a.txt").read_text() == user
    (c,) = result.conflicts
    assert (c.ours, c.theirs, c.base) == ("three (agent)\n", "three (user)\n", "three\n")
    msg = result.message_for_agent
    assert "<<<<<<< agent" in msg and "three (user)" in msg and "Read the file again" in msg
    assert result.marked is not None and "<<<<<<< agent\nthree (agent)\n=======" in result.marked
    (event,) = edits(session)
    assert event.outcome == "conflict" and event.conflicts == 1 and event.result == event.disk
    # The agent must read again: its view did not move to a content it has not seen.
    assert ws.view("a.txt") == seen


def test_markers_policy_writes_git_style_markers(ws: Workspace, root: Path) -> None:
    (root / "a.txt").write_text(FIVE)
    ws.read("a.txt")
    (root / "a.txt").write_text(FIVE.replace("three", "user"))
    result = ws.edit("a.txt", "three", "agent", policy="markers")
    assert result.outcome == "conflict_markers"
    assert (root / "a.txt").read_text() == (
        "one\ntwo\n<<<<<<< agent\nagent\n=======\nuser\n>>>>>>> disk\nfour\nfive\n"
    )
    assert ws.view("a.txt") == result.result


def test_edit_match_errors_tell_the_agent_what_it_saw(ws: Workspace, root: Path) -> None:
    (root / "a.py").write_text("def f():\n    return 1\n\ndef g():\n    return 1\n")
    ws.read("a.py")
    none = ws.edit("a.py", "def h():\n    return 2", "x")
    assert none.outcome == "error" and "not found" in none.message_for_agent
    many = ws.edit("a.py", "return 1", "return 2")
    assert many.outcome == "error" and "2 places" in many.message_for_agent
    assert "lines 2, 5" in many.message_for_agent
    assert (root / "a.py").read_text().count("return 1") == 2
    everywhere = ws.edit("a.py", "return 1", "return 2", replace_all=True)
    assert everywhere.ok and (root / "a.py").read_text().count("return 2") == 2


def test_whitespace_tolerant_match_keeps_the_files_indentation(ws: Workspace, root: Path) -> None:
    (root / "a.py").write_text("class A:\n\tdef f(self):\n\t\treturn 1\n")
    ws.read("a.py")
    result = ws.edit("a.py", "def f(self):\n    return 1\n", "def f(self):\n    return 2\n")
    assert result.ok
    assert (root / "a.py").read_text() == "class A:\n\tdef f(self):\n\t\treturn 2\n"


def test_edit_without_a_read_is_refused_and_empty_old_string_creates(
    ws: Workspace, root: Path
) -> None:
    (root / "a.txt").write_text(FIVE)
    assert "read it first" in ws.edit("a.txt", "one", "1").message_for_agent
    created = ws.edit("b.txt", "", "new\n")
    assert created.outcome == "direct" and (root / "b.txt").read_text() == "new\n"


def test_file_mode_is_kept_and_no_temp_files_remain(ws: Workspace, root: Path) -> None:
    script = root / "run.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o751)
    ws.read("run.sh")
    assert ws.edit("run.sh", "hi", "hello").ok
    assert stat.S_IMODE(script.stat().st_mode) == 0o751
    # Temporary files go to the (then empty) scratch directory, never beside the user's files.
    assert sorted(os.listdir(root)) == [".coder-es", "run.sh"]
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == [
        ".coder-es",
        ".coder-es/tmp",
        "run.sh",
    ]


def test_writing_through_a_symlink_replaces_the_target_not_the_link(
    ws: Workspace, root: Path
) -> None:
    (root / "real.txt").write_text(FIVE)
    (root / "link.txt").symlink_to("real.txt")
    r = ws.read("link.txt")
    assert r.path == "real.txt"
    assert ws.edit("link.txt", "one", "1").ok
    assert (root / "link.txt").is_symlink()
    assert (root / "real.txt").read_text().startswith("1\n")


def test_restore_keeps_a_non_overlapping_user_edit(
    ws: Workspace, root: Path, blobs: MemoryBlobStore
) -> None:
    (root / "a.txt").write_text(FIVE)
    before = ws.read("a.txt").hash
    after = ws.edit("a.txt", "four", "FOUR").result
    (root / "a.txt").write_text("one (user)\ntwo\nthree\nFOUR\nfive\n")
    result = ws.restore("a.txt", after, before)
    assert result.outcome == "merged"
    assert (root / "a.txt").read_text() == "one (user)\ntwo\nthree\nfour\nfive\n"


def test_restore_with_an_overlapping_user_edit_reports_a_conflict(
    ws: Workspace, root: Path
) -> None:
    (root / "a.txt").write_text(FIVE)
    before = ws.read("a.txt").hash
    after = ws.edit("a.txt", "four", "FOUR").result
    (root / "a.txt").write_text("one\ntwo\nthree\nFOUR and user\nfive\n")
    result = ws.restore("a.txt", after, before)
    assert result.outcome == "conflict"
    assert (root / "a.txt").read_text() == "one\ntwo\nthree\nFOUR and user\nfive\n"


def test_restore_deletes_and_recreates(ws: Workspace, root: Path) -> None:
    created = ws.write("new.txt", "hello\n").result
    gone = ws.restore("new.txt", created, None)
    assert gone.outcome == "direct" and not (root / "new.txt").exists()
    back = ws.restore("new.txt", None, created)
    assert back.outcome == "direct" and (root / "new.txt").read_text() == "hello\n"
    # A file the user changed since is not deleted.
    (root / "new.txt").write_text("hello\nuser\n")
    kept = ws.restore("new.txt", created, None)
    assert kept.outcome == "conflict" and (root / "new.txt").read_text() == "hello\nuser\n"


def test_views_rebuild_from_events(ws: Workspace, root: Path, session: Session) -> None:
    (root / "a.txt").write_text(FIVE)
    (root / "b.txt").write_text("b\n")
    ws.read("a.txt")
    ws.edit("a.txt", "one", "1")
    ws.read("b.txt")
    (root / "b.txt").write_text("b user\n")
    ws.edit("b.txt", "b", "b agent")  # conflict: the view stays
    ws.write("c.txt", "c\n")
    ws.read("missing.txt")
    # A shell command changed a file; the tool layer records it and tells the workspace.
    index = ws.stat_index()
    (root / "a.txt").write_text("shell\n")
    changes = index.rescan()
    assert [c.path for c in changes] == ["a.txt"]
    session.complete_tool_call(
        tool_use_id="t9", name="bash", output="", files_changed=[c.as_event() for c in changes]
    )
    ws.note_changes(changes)
    rebuilt = Workspace.views_from_events(all_events(session))
    assert rebuilt == ws.views
    assert rebuilt["missing.txt"] is None and rebuilt["a.txt"] == changes[0].after


def test_blobs_of_every_recorded_hash_are_stored(
    ws: Workspace, root: Path, session: Session, blobs: MemoryBlobStore
) -> None:
    (root / "a.txt").write_text(FIVE)
    ws.read("a.txt")
    (root / "a.txt").write_text(FIVE + "six\n")
    ws.edit("a.txt", "one", "1")
    ws.write("unread.txt", "x")
    (root / "x.txt").write_text("x\n")
    ws.write("x.txt", "y\n")
    for e in edits(session):
        for h in (e.base, e.disk, e.proposed, e.result):
            if h is not None:
                assert blobs.has(h)


def test_file_change_kinds() -> None:
    assert FileChange("a", None, "h").kind == "created"
    assert FileChange("a", "h", None).kind == "deleted"
    assert FileChange("a", "h", "i").kind == "modified"
