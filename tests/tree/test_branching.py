"""Fork, checkout, rewind and label over a real workspace directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tree_sim import Agent, sha

from coder_es.application import CoderApp
from coder_es.errors import UsageError
from coder_es.store.config import StoreConfig
from projections.checkpoint import encode_state
from projections.files import FORMAT, MISSING, track_files

LINES = b"".join(b"line %d\n" % i for i in range(1, 11))


@pytest.fixture
def agent(store_config: StoreConfig, tmp_path: Path) -> Iterator[Agent]:
    """An agent on each backend: branching reads events, snapshots, blobs and checkpoints."""
    app = CoderApp(store_config)
    ws = tmp_path / "ws"
    ws.mkdir()
    session = app.start_session(workspace=str(ws))
    yield Agent(app, ws, session.id)
    app.close()


def _replace(data: bytes, old: bytes, new: bytes) -> bytes:
    assert old in data
    return data.replace(old, new, 1)


def test_rewinding_an_agent_edit_merged_over_a_user_edit_keeps_the_user_edit(agent: Agent) -> None:
    agent.user_message("create it")
    created = agent.model_edit({"a.txt": LINES})
    agent.user_edit("a.txt", _replace(LINES, b"line 1\n", b"line 1 by the user\n"))
    agent.user_message("now change the end")
    asked = agent.user_message("really")
    agent.model_edit({"a.txt": _replace(LINES, b"line 10\n", b"line 10 by the agent\n")})
    both = agent.read("a.txt")
    assert both is not None and b"by the user" in both and b"by the agent" in both

    result = agent.branching.rewind(agent.sid, asked)
    assert not result.conflicts
    assert agent.read("a.txt") == _replace(LINES, b"line 1\n", b"line 1 by the user\n")
    # Further back than the user's edit: the agent's original file, with the user's line still
    # (the user's bytes are never the session's: no rewind takes them away).
    agent.branching.rewind(agent.sid, created)
    assert agent.read("a.txt") == _replace(LINES, b"line 1\n", b"line 1 by the user\n")


def test_a_shell_change_over_a_user_edit_rewinds_to_the_user_version(agent: Agent) -> None:
    first = agent.model_edit({"b.txt": b"one\n"})
    agent.user_edit("b.txt", b"one\nmine\n")
    agent.shell({"b.txt": b"generated\n"})
    agent.branching.rewind(agent.sid, first)
    assert agent.read("b.txt") == b"one\nmine\n"


def test_checkout_merges_a_non_overlapping_user_edit_and_records_it(agent: Agent) -> None:
    base = agent.model_edit({"a.txt": LINES})
    agent.model_edit({"a.txt": _replace(LINES, b"line 9\n", b"line 9 v2\n"), "new.txt": b"x\n"})
    agent.user_edit("a.txt", _replace(agent.read("a.txt") or b"", b"line 2\n", b"line 2 mine\n"))
    result = agent.branching.checkout(agent.sid, base)
    outcomes = {f.path: f.outcome for f in result.files}
    assert outcomes == {"a.txt": "merged", "new.txt": "restored"}
    assert agent.read("a.txt") == _replace(LINES, b"line 2\n", b"line 2 mine\n")
    assert agent.read("new.txt") is None
    recorded = agent.app.session_events(agent.sid)[-2]
    assert type(recorded).__name__ == "WorkspaceRestored"
    assert {e["path"]: e["outcome"] for e in recorded.entries} == outcomes


def test_an_overlapping_user_edit_is_left_alone_and_reported(agent: Agent) -> None:
    base = agent.model_edit({"a.txt": LINES})
    agent.model_edit({"a.txt": _replace(LINES, b"line 5\n", b"line 5 agent\n")})
    mine = _replace(LINES, b"line 5\n", b"line 5 user\n")
    agent.user_edit("a.txt", mine)
    head = agent.app.get_session(agent.sid).head
    result = agent.branching.checkout(agent.sid, base)
    assert [c.path for c in result.conflicts] == ["a.txt"]
    assert agent.read("a.txt") == mine
    # Going back is the identity: the user's file is what the disk held at the old head.
    back = agent.branching.checkout(agent.sid, head or "")
    assert not back.conflicts and agent.read("a.txt") == mine


def test_rewind_modes_and_switch_back_is_the_identity(agent: Agent) -> None:
    first = agent.model_edit({"a.txt": LINES})
    agent.user_message("more")
    agent.model_edit({"a.txt": LINES + b"more\n", "b.txt": b"b\n"})
    head = agent.app.get_session(agent.sid).head
    assert head is not None
    before = agent.snapshot()

    only_conv = agent.branching.rewind(agent.sid, first, conversation=True, files=False)
    assert only_conv.head_moved and not only_conv.files and agent.snapshot() == before
    assert agent.app.get_session(agent.sid).head == first
    agent.branching.checkout(agent.sid, head)
    assert agent.snapshot() == before

    only_files = agent.branching.rewind(agent.sid, first, conversation=False, files=True)
    assert not only_files.head_moved and agent.app.get_session(agent.sid).head == head
    assert agent.snapshot() == {"a.txt": LINES}
    agent.branching.checkout(agent.sid, head)
    assert agent.snapshot() == before

    agent.branching.rewind(agent.sid, first)
    assert agent.snapshot() == {"a.txt": LINES}
    agent.branching.checkout(agent.sid, head)
    assert agent.snapshot() == before


def test_rewind_refuses_a_node_off_the_current_branch(agent: Agent) -> None:
    first = agent.user_message("a")
    second = agent.user_message("b")
    agent.branching.fork(agent.sid, first)
    agent.user_message("c")
    with pytest.raises(UsageError, match="not on the path to the head"):
        agent.branching.rewind(agent.sid, second)
    with pytest.raises(UsageError):
        agent.branching.rewind(agent.sid, "no-such-node")


def test_fork_in_the_session_makes_a_branch(agent: Agent) -> None:
    first = agent.user_message("a")
    agent.model_edit({"a.txt": b"v1\n"})
    result = agent.branching.fork(agent.sid, first)
    assert result.node == first and agent.read("a.txt") is None
    other = agent.user_message("another way")
    tree = agent.branching.tree(agent.sid)
    assert tree.parent_of(other) == first and len(tree.children(first)) == 2


def test_fork_into_a_new_session_copies_nothing(agent: Agent) -> None:
    agent.user_message("a")
    middle = agent.model_edit({"a.txt": b"v1\n"})
    agent.model_edit({"a.txt": b"v2\n"})
    parent_events = len(agent.app.session_events(agent.sid))
    result = agent.branching.fork(agent.sid, middle, new_session=True)
    assert result.forked_from == (str(agent.sid), middle)
    assert agent.read("a.txt") == b"v1\n"
    child = agent.app.get_session(result.session)
    assert (child.parent_session, child.parent_node) == (str(agent.sid), middle)
    assert len(agent.app.session_events(child.id)) == 1
    assert len(agent.app.session_events(agent.sid)) == parent_events + 1  # the restoration
    # The child inherits the parent's files at the fork node and branches from there.
    kid = Agent(agent.app, agent.ws, child.id)
    assert kid.branching.files(child.id).value_at(None, "a.txt") == sha(b"v1\n")
    kid.model_edit({"a.txt": b"v1\nchild\n"})
    kid.branching.rewind(child.id, kid.branching.tree(child.id).nodes()[0])
    assert agent.read("a.txt") == b"v1\n"
    # And the parent can still go back to its own head.
    agent.branching.checkout(agent.sid, agent.app.get_session(agent.sid).head or "")
    assert agent.read("a.txt") == b"v2\n"


def test_labels_name_nodes(agent: Agent) -> None:
    first = agent.user_message("a")
    agent.user_message("b")
    assert agent.branching.label(str(agent.sid)[:8], first, "start").node == first
    agent.branching.checkout(agent.sid, "start")
    assert agent.app.get_session(agent.sid).head == first


def test_diff_lists_turns_and_files(agent: Agent) -> None:
    first = agent.model_edit({"a.txt": b"a\n"})
    one = agent.model_edit({"a.txt": b"a1\n", "b.txt": b"b\n"})
    agent.branching.fork(agent.sid, first)
    agent.user_message("the other way")
    two = agent.model_edit({"a.txt": b"a2\n"})
    diff = agent.branching.diff(agent.sid, one, two)
    assert diff.common == first
    assert [f.path for f in diff.files] == ["a.txt", "b.txt"]
    assert diff.files[1].b is None and diff.files[0].b == sha(b"a2\n")
    assert [m.kind for m in diff.only_b] == ["user", "assistant", "tool_result"]


def test_files_projection_checkpoint_equals_rebuild(agent: Agent) -> None:
    agent.model_edit({"a.txt": LINES})
    agent.user_edit("a.txt", LINES + b"user\n")
    node = agent.model_edit({"a.txt": b"x\n" + LINES})
    agent.branching.checkpoint()
    agent.branching.rewind(agent.sid, "2")
    agent.shell({"c.txt": b"c\n"})
    reopened = track_files(agent.app, agent.sid).catch_up()
    rebuilt = track_files(agent.app, agent.sid).rebuild()
    assert encode_state(reopened, FORMAT) == encode_state(rebuilt, FORMAT)
    assert rebuilt.value_at(node, "c.txt") is MISSING or rebuilt.value_at(node, "c.txt") is None


GREET_V1 = b'def greet(name):\n    return f"Hello, {name}."\n'
GREET_SHOUT = b'def greet(name):\n    return f"HELLO, {name.upper()}!"\n'
GREET_POLITE = b'def greet(name):\n    return f"Good day, dear {name}."\n'
DOCSTRING = b'"""Greetings."""\n\n\n'


def test_a_rewind_after_a_conflicted_rewind_merges_the_users_resolution(agent: Agent) -> None:
    """The `coder-es demo` session: v1, then a shout branch and a polite branch from v1."""
    agent.user_message("Add a greet(name) function in greet.py.")
    v1 = agent.model_edit({"greet.py": GREET_V1})
    agent.user_message("Make it shout.")
    shout = agent.model_edit({"greet.py": GREET_SHOUT})
    agent.branching.fork(agent.sid, v1)
    agent.user_message("Actually, make it polite instead.")
    polite = agent.model_edit({"greet.py": GREET_POLITE})
    agent.branching.checkout(agent.sid, shout)

    agent.branching.checkout(agent.sid, polite)
    assert agent.read("greet.py") == GREET_POLITE
    noted = GREET_POLITE + b"# my note\n"  # next to the line v1 changes
    agent.user_edit("greet.py", noted)
    conflicted = agent.branching.rewind(agent.sid, v1)
    assert [c.path for c in conflicted.conflicts] == ["greet.py"]
    assert agent.read("greet.py") == noted

    # The user resolves: a docstring on top, the note dropped.
    agent.user_edit("greet.py", DOCSTRING + GREET_POLITE)
    assert not agent.branching.checkout(agent.sid, polite).conflicts
    assert agent.read("greet.py") == DOCSTRING + GREET_POLITE
    result = agent.branching.rewind(agent.sid, v1)
    assert not result.conflicts
    assert agent.read("greet.py") == DOCSTRING + GREET_V1
    assert [(f.path, f.outcome) for f in result.files] == [("greet.py", "merged")]
    events = agent.app.session_events(agent.sid)
    assert [type(e).__name__ for e in events[-2:]] == ["WorkspaceRestored", "HeadMoved"]
    # No move redefined what a node holds: v1 is still v1, polite still the agent's polite.
    files = agent.branching.files(agent.sid)
    assert files.value_at(v1, "greet.py") == sha(GREET_V1)
    assert files.value_at(polite, "greet.py") == sha(GREET_POLITE)
    # Switching branches carries the user's docstring along.
    agent.branching.checkout(agent.sid, shout)
    assert agent.read("greet.py") == DOCSTRING + GREET_SHOUT
