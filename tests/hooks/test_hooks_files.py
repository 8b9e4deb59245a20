"""Files a hook changes outside any tool call (Stop, UserPromptSubmit, SessionStart...) are the
session's: recorded in the file history, attributed to the hook in ``tree``, undone by rewind."""

from __future__ import annotations

from uuid import UUID

from agent_helpers import Harness, collect, text, turn
from hook_helpers import claude, start

from coder_es.branching import Branching
from coder_es.views.tree import render_tree
from projections.files import open_files
from projections.tree import open_tree


def test_a_stop_hooks_file_is_undone_by_a_rewind_to_the_start_and_a_users_edit_stays(
    h: Harness,
) -> None:
    hooks = [claude("Stop", "echo made by the stop hook > stop-notes.txt")]
    handle = start(h, [turn(text("all done"))], hooks)
    collect(handle, "finish up")
    assert (h.root / "stop-notes.txt").read_text() == "made by the stop hook\n"
    (ran,) = h.of(handle, "HookRan")
    assert [c["path"] for c in ran.effect["files_changed"]] == ["stop-notes.txt"]
    # The file history has it, at the node the hook ran after, named as the hook's.
    files = open_files(h.app, UUID(handle.id))
    head = str(files.head)
    assert files.changed_at(head) == ["stop-notes.txt"]
    assert files.hooks_at(head) == {"stop-notes.txt": ran.hook}
    assert ran.hook.startswith("hooks.Stop[0]")
    tree = open_tree(h.app, UUID(handle.id))
    assert any("stop-notes.txt (hook)" in line for line in render_tree(tree, files, {}))
    first = next(e for e in h.events(handle) if type(e).__name__ == "UserMessageAdded")
    diff = Branching(h.app, h.root).diff(handle.id, str(first.originator_version), head)
    assert [f.path for f in diff.files] == ["stop-notes.txt"]
    assert diff.by_hook == {"stop-notes.txt": {"b": ran.hook}}
    # The user edits a file of their own after the turn.
    readme = h.root / "README.md"
    users = readme.read_text() + "a line of the user's\n"
    readme.write_text(users)
    Branching(h.app, h.root).rewind(handle.id, str(first.originator_version))
    assert not (h.root / "stop-notes.txt").exists()
    assert readme.read_text() == users


def test_a_prompt_hooks_file_before_the_first_node_joins_the_users_message(h: Harness) -> None:
    hooks = [claude("UserPromptSubmit", "echo from the prompt hook > prompt-notes.txt")]
    handle = start(h, [turn(text("ok"))], hooks)
    collect(handle, "first")
    files = open_files(h.app, UUID(handle.id))
    first = next(e for e in h.events(handle) if type(e).__name__ == "UserMessageAdded")
    node = str(first.originator_version)
    (ran,) = h.of(handle, "HookRan")
    assert files.hooks_at(node) == {"prompt-notes.txt": ran.hook}
    assert files.value_at(None, "prompt-notes.txt") is None  # absent at the start
    assert files.value_at(node, "prompt-notes.txt") == ran.effect["files_changed"][0]["after"]
