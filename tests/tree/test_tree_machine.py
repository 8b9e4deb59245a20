"""A random walk through branching: messages, agent edits, shell changes, user edits, forks,
switches, rewinds and labels on real files, checking after every step that

- the projections maintained incrementally (and reloaded from checkpoints) equal a rebuild;
- without user edits, switching to a node reproduces that node's files byte for byte;
- a user's line is never silently lost: it stays on disk or is in the recorded state of a node;
- rewind then switching back to the old head is the identity (conversation and files).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from tree_sim import Agent

from coder_es.application import CoderApp
from coder_es.store.config import StoreConfig
from projections.checkpoint import encode_state
from projections.files import FORMAT as FILES_FORMAT
from projections.files import track_files
from projections.tree import FORMAT as TREE_FORMAT
from projections.tree import track_tree

PATHS = ["a.txt", "b.txt", "sub/c.txt"]
START = [b"alpha\n", b"beta\n", b"gamma\n", b"delta\n", b"epsilon\n"]


def _lines(data: bytes | None) -> list[bytes]:
    return [] if data is None else data.splitlines(keepends=True)


class Branching(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="coder-es-tree-"))
        ws = self.dir / "ws"
        ws.mkdir()
        self.app = CoderApp(StoreConfig(backend="popo", path=self.dir / "store"))
        session = self.app.start_session(workspace=str(ws))
        self.agent = Agent(self.app, ws, session.id)
        self.counter = 0
        self.user_edited = False
        self.snapshots: dict[str | None, dict[str, bytes]] = {None: {}}

    def teardown(self) -> None:
        self.app.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------------ helpers

    def _n(self) -> int:
        self.counter += 1
        return self.counter

    def _nodes(self) -> list[str]:
        return self.agent.branching.tree(self.agent.sid).nodes()

    def _pick(self, index: int) -> str | None:
        nodes = self._nodes()
        return nodes[index % len(nodes)] if nodes else None

    def _head(self) -> str | None:
        return self.app.get_session(self.agent.sid).head

    def _created(self, node: str) -> str:
        self.snapshots[node] = self.agent.snapshot()
        return node

    def _user_lines_on_disk(self) -> set[bytes]:
        return {
            line
            for data in self.agent.snapshot().values()
            for line in _lines(data)
            if line.startswith(b"user-")
        }

    def _recorded_lines(self) -> set[bytes]:
        files = self.agent.branching.files(self.agent.sid)
        out: set[bytes] = set()
        for node in [None, *self._nodes()]:
            for digest in files.state_at(node).values():
                if digest is not None:
                    out.update(_lines(self.app.blobs.get(digest)))
        return out

    def _moved(self, before_lines: set[bytes]) -> None:
        lost = before_lines - self._user_lines_on_disk()
        assert lost <= self._recorded_lines(), f"user lines lost: {lost}"

    def _check_reproduces(self, node: str | None) -> None:
        if not self.user_edited:
            assert self.agent.snapshot() == self.snapshots[node]

    # ------------------------------------------------------------------ rules

    @rule()
    def user_message(self) -> None:
        self._created(self.agent.user_message(f"message {self._n()}"))

    @rule(
        path=st.sampled_from(PATHS),
        op=st.sampled_from(["change", "append", "delete"]),
        line=st.integers(0, 10),
    )
    def model_turn_with_edit(self, path: str, op: str, line: int) -> None:
        files = self.agent.branching.files(self.agent.sid)
        seen = files.known.get(path)
        view = _lines(None if seen is None else self.app.blobs.get(seen))
        n = self._n()
        if op == "delete" and view:
            proposed = None
        elif not view:
            proposed = b"".join(START)
        elif op == "change":
            view[line % len(view)] = b"agent-%d\n" % n
            proposed = b"".join(view)
        else:
            proposed = b"".join([*view, b"agent-%d\n" % n])
        before = self._user_lines_on_disk()
        on_disk = self.agent.snapshot()
        node = self.agent.model_edit({path: proposed})
        response = self.agent.branching.tree(self.agent.sid).parent_of(node)
        self.snapshots[response] = on_disk  # the response node: the tool had not run yet
        self._created(node)
        self._moved(before)

    @rule(path=st.sampled_from(PATHS), op=st.sampled_from(["append", "delete", "create"]))
    def shell_command(self, path: str, op: str) -> None:
        data = self.agent.read(path)
        n = self._n()
        if op == "delete":
            new = None
        elif op == "create" or data is None:
            new = b"shell-%d\n" % n
        else:
            new = data + b"shell-%d\n" % n
        before = self._user_lines_on_disk()
        self._created(self.agent.shell({path: new}))
        self._moved(before)

    @rule(path=st.sampled_from(PATHS), where=st.integers(0, 10), replace=st.booleans())
    def user_edit_outside(self, path: str, where: int, replace: bool) -> None:
        lines = _lines(self.agent.read(path))
        mine = b"user-%d\n" % self._n()
        if lines and replace:
            lines[where % len(lines)] = mine
        else:
            lines.insert(where % (len(lines) + 1), mine)
        self.agent.user_edit(path, b"".join(lines))
        self.user_edited = True

    @precondition(lambda self: self._head() is not None)
    @rule(index=st.integers(0, 1000))
    def fork(self, index: int) -> None:
        node = self._pick(index)
        before = self._user_lines_on_disk()
        self.agent.branching.fork(self.agent.sid, node)
        assert self._head() == node
        self._moved(before)
        self._check_reproduces(node)

    @precondition(lambda self: self._head() is not None)
    @rule(index=st.integers(0, 1000))
    def switch(self, index: int) -> None:
        node = self._pick(index)
        assert node is not None
        before = self._user_lines_on_disk()
        self.agent.branching.checkout(self.agent.sid, node)
        assert self._head() == node
        self._moved(before)
        self._check_reproduces(node)

    def _ancestor(self, index: int) -> str:
        path = self.agent.branching.tree(self.agent.sid).path(self._head())
        return path[index % len(path)]

    @precondition(lambda self: self._head() is not None)
    @rule(index=st.integers(0, 1000), mode=st.sampled_from(["both", "conversation", "files"]))
    def rewind(self, index: int, mode: str) -> None:
        target = self._ancestor(index)
        head = self._head()
        on_disk = self.agent.snapshot()
        before = self._user_lines_on_disk()
        self.agent.branching.rewind(
            self.agent.sid, target, conversation=mode != "files", files=mode != "conversation"
        )
        assert self._head() == (head if mode == "files" else target)
        if mode == "conversation":
            assert self.agent.snapshot() == on_disk
        else:
            self._check_reproduces(target)
        self._moved(before)

    @precondition(lambda self: self._head() is not None)
    @rule(index=st.integers(0, 1000), mode=st.sampled_from(["both", "conversation", "files"]))
    def rewind_then_switch_back(self, index: int, mode: str) -> None:
        files = self.agent.branching.files(self.agent.sid)
        if files.dirty or files.pending:
            return  # the workspace is not at the head's state: switching back would fix it
        target = self._ancestor(index)
        head = self._head()
        assert head is not None
        on_disk = self.agent.snapshot()
        self.agent.branching.rewind(
            self.agent.sid, target, conversation=mode != "files", files=mode != "conversation"
        )
        self.agent.branching.checkout(self.agent.sid, head)
        assert self._head() == head
        assert self.agent.snapshot() == on_disk

    @precondition(lambda self: self._head() is not None)
    @rule(index=st.integers(0, 1000), name=st.sampled_from(["good", "bad", "v1"]))
    def label(self, index: int, name: str) -> None:
        node = self._pick(index)
        assert node is not None
        self.agent.branching.label(self.agent.sid, node, name)
        assert self.agent.branching.tree(self.agent.sid).resolve(name) == node

    @rule()
    def restart(self) -> None:
        """A new process: projections reopen from their checkpoints."""
        self.agent.branching.checkpoint()
        self.agent = Agent(self.app, self.agent.ws, self.agent.sid)

    # ------------------------------------------------------------------ invariants

    @invariant()
    def incremental_equals_rebuilt(self) -> None:
        views = self.agent.branching.views(self.agent.sid)
        tree = track_tree(self.app, self.agent.sid).rebuild()
        files = track_files(self.app, self.agent.sid).rebuild()
        assert encode_state(views.tree.projection, TREE_FORMAT) == encode_state(tree, TREE_FORMAT)
        assert encode_state(views.files.projection, FILES_FORMAT) == encode_state(
            files, FILES_FORMAT
        )


Branching.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestBranching = Branching.TestCase
