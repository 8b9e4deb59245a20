"""A client's open session after its head moved: ``SessionHandle.reload``."""

from __future__ import annotations

import json

from agent_helpers import Harness, collect, text, tool, turn

from coder_es.branching import Branching


def test_reload_continues_from_the_moved_head_with_the_same_script(h: Harness) -> None:
    handle = h.start(
        [
            turn(tool("write", path="notes.txt", content="v1\n")),
            turn(text("Wrote the notes.")),
            turn(text("Second answer.")),
        ]
    )
    collect(handle, "write the notes")
    assert (h.root / "notes.txt").read_text() == "v1\n"
    first_user = h.of(handle, "UserMessageAdded")[0].originator_version

    moved = Branching(h.app, h.root).rewind(handle.id, str(first_user))
    assert not (h.root / "notes.txt").exists()
    handle.reload()
    updates = collect(handle, "do it differently")

    assert updates[-1].reason == "end_turn"  # type: ignore[attr-defined]
    # One provider throughout: the script went on to its third turn instead of starting again
    # (which would have written the notes a second time).
    assert len(h.providers) == 1
    assert h.of(handle, "ModelResponded")[-1].blocks == [text("Second answer.")]
    assert not (h.root / "notes.txt").exists()
    # The new turn grew from the node the head was moved to, without the abandoned branch.
    new_user = h.of(handle, "UserMessageAdded")[-1]
    assert new_user.parent == moved.node
    sent = json.dumps(h.providers[0].requests[-1].messages)
    assert "do it differently" in sent and "Wrote the notes." not in sent
