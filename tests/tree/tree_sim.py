"""An agent driven by hand over a real temp workspace: it records events the way the loop will.

- a model turn that edits files: ``ModelResponded`` (tool_use), then per file an ``EditApplied``
  produced by the workspace's own three-way merge (base = what the session last knew, disk = the
  file now, proposed = the agent's version), then ``ToolCallCompleted``;
- a shell command: the files are changed directly, then ``ToolCallCompleted.files_changed`` lists
  {path, before, after};
- a user edit: the file changes on disk and nothing is recorded.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from uuid import UUID

from coder_es.application import CoderApp
from coder_es.branching import Branching
from coder_es.workspace.atomic import compare_and_swap_at, read_current
from coder_es.workspace.confined import ConfinedDir
from coder_es.workspace.contents import merge_contents


def sha(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


class Agent:
    def __init__(self, app: CoderApp, workspace: Path, session_id: UUID) -> None:
        self.app = app
        self.ws = workspace
        self.sid = session_id
        self.branching = Branching(app, workspace, checkpoint_every=7)
        self.turn = 0

    def read(self, path: str) -> bytes | None:
        return read_current(self.ws / path)

    def snapshot(self) -> dict[str, bytes]:
        return {
            p.relative_to(self.ws).as_posix(): p.read_bytes()
            for p in sorted(self.ws.rglob("*"))
            if p.is_file()
        }

    def user_message(self, text: str) -> str:
        return self.app.update(self.sid, lambda s: s.add_user_message(text))

    def model_edit(self, edits: dict[str, bytes | None]) -> str:
        """One model turn whose tool call writes ``edits`` (None deletes) on top of its view."""
        self.turn += 1
        tool_use_id = f"toolu_{self.turn}"
        files = self.branching.files(self.sid)
        session = self.app.get_session(self.sid)
        session.record_model_response(
            blocks=[{"type": "tool_use", "id": tool_use_id, "name": "write", "input": {}}],
            stop_reason="tool_use",
            usage={},
            provider="scripted",
            model="m",
        )
        for path, proposed in sorted(edits.items()):
            seen = files.known[path] if path in files.known else files.current(path)
            base = seen if isinstance(seen, str) else None
            base_data = None if base is None else self.app.blobs.get(base)
            disk = self.read(path)
            merged = merge_contents(base_data, disk, proposed)
            if merged.kind == "conflict":
                result, outcome = disk, "conflict"
            else:
                result, outcome = merged.data, ("direct" if disk == base_data else "merged")
                with ConfinedDir(self.ws) as tree:
                    dir_fd, name = tree.parent(path, create=True)
                    assert compare_and_swap_at(dir_fd, name, result, expected=disk)
            for data, like in ((disk, base), (proposed, base), (result, base)):
                if data is not None:
                    self.app.blobs.put(data, like=like)
            session.apply_edit(
                path=path,
                base=base,
                disk=sha(disk),
                proposed=sha(proposed),
                result=sha(result),
                outcome=outcome,
                conflicts=int(outcome == "conflict"),
                tool_use_id=tool_use_id,
            )
        node = session.complete_tool_call(tool_use_id=tool_use_id, name="write", output="ok")
        self.app.save(session)
        return node

    def shell(self, writes: dict[str, bytes | None]) -> str:
        """A shell command that rewrites or deletes files; the change is detected and listed."""
        self.turn += 1
        changed = []
        for path, data in sorted(writes.items()):
            target = self.ws / path
            before = self.read(path)
            if data is None:
                target.unlink(missing_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
            if before != data:
                for blob in (before, data):
                    if blob is not None:
                        self.app.blobs.put(blob)
                changed.append({"path": path, "before": sha(before), "after": sha(data)})
        return self.app.update(
            self.sid,
            lambda s: s.complete_tool_call(
                tool_use_id=f"toolu_{self.turn}", name="bash", output="", files_changed=changed
            ),
        )

    def user_edit(self, path: str, data: bytes | None) -> None:
        target = self.ws / path
        if data is None:
            target.unlink(missing_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
