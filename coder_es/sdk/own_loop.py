"""``OwnLoop``: the turns of an agent loop of your own, recorded as coder_es events.

For builders who keep their loop (their model client, their tools) and want coder_es's
conversation tree, rewind, export and verify for it. Each call records what the built-in loop
records for the same step, in the same events (``coder_es.domain.session``)::

    user(text)                 -> UserMessageAdded                 (a node)
    model(text, tool_calls)    -> ModelResponded + ToolCallRequested per call (a node)
    permission(id, allowed)    -> PermissionDecided
    observe(paths)             -> FileObserved (the file's content kept as a blob)
    tool_result(id, output,    -> ToolCallCompleted with files_changed (a node); the files'
                files=paths)      contents before and after are kept as blobs

so ``coder-es tree`` / ``rewind`` / ``export`` / ``verify`` / ``search`` treat the session like
any other. Secrets are sealed as in every session. The session's lease (one writer per session)
is held from ``open`` to ``close``: no other process or handle records into it meanwhile.

Files: list in ``tool_result(files=...)`` each path a call of yours changed; what it held
before is the session's last known content of the path (an earlier result, ``observe``), so call
``observe`` before a tool changes a file the session has not seen yet. That is what lets a
rewind put the files back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar
from uuid import uuid4

from coder_es.domain.session import Session
from coder_es.errors import UsageError
from coder_es.workspace.confined import ConfinedDir

if TYPE_CHECKING:
    from coder_es.application import CoderApp
    from coder_es.store.lease import Lease

T = TypeVar("T")


@dataclass(frozen=True)
class ToolUse:
    """One tool call of a model response of your loop."""

    id: str
    name: str
    input: Mapping[str, Any] = field(default_factory=dict)

    def block(self) -> dict[str, Any]:
        return {"type": "tool_use", "id": self.id, "name": self.name, "input": dict(self.input)}


class OwnLoop:
    """Records one session's turns as your loop reports them (see the module docstring)."""

    def __init__(self, app: CoderApp, workspace: Path, session: Session, lease: Lease) -> None:
        self._app = app
        self._workspace = workspace
        self._session = session
        self._lease: Lease | None = lease
        self._calls: dict[str, str] = {}
        self._known: dict[str, str | None] | None = None
        self._provider = session.provider
        self._model = session.model

    @classmethod
    def open(
        cls,
        app: CoderApp,
        workspace: Path,
        session: str | None,
        *,
        provider: str,
        model: str,
        title: str,
        agent: str,
    ) -> OwnLoop:
        if session is None:
            created = app.start_session(
                workspace=str(workspace),
                agent=agent,
                provider=provider,
                model=model,
                title=title,
                settings={"recorded_by": "own-loop"},
                id=uuid4(),
            )
            sid = created.id
        else:
            sid = app.resolve_session(session)
        lease = app.leases.acquire(str(sid), "own loop")
        try:
            loaded = app.get_session(sid)  # after the lease: whatever another writer saved
            if Path(loaded.workspace).resolve() != workspace:
                msg = f"session {sid} belongs to the workspace {loaded.workspace}, not {workspace}"
                raise UsageError(msg)
        except BaseException:
            lease.release()
            raise
        return cls(app, workspace, loaded, lease)

    @property
    def id(self) -> str:
        return str(self._session.id)

    @property
    def head(self) -> str | None:
        return self._session.head

    # ------------------------------------------------------------------ recording

    def _record(self, command: Callable[[Session], T]) -> T:
        if self._lease is None:
            msg = f"the own loop of session {self.id} is closed"
            raise UsageError(msg)
        result = command(self._session)
        self._app.save(self._session)
        return result

    def user(self, text: str) -> str:
        """The user's message; returns its node."""
        if not text.strip():
            raise UsageError("the message is empty")
        return self._record(lambda s: s.add_user_message(text))

    def model(
        self,
        text: str = "",
        *,
        tool_calls: Sequence[ToolUse] = (),
        thinking: str | None = None,
        stop_reason: str | None = None,
        usage: Mapping[str, int] | None = None,
        model: str | None = None,
    ) -> str:
        """A model response: its text and tool calls (each then waits for ``tool_result``).
        ``stop_reason`` defaults to ``tool_use`` when it calls tools, else ``end_turn``."""
        blocks: list[dict[str, Any]] = []
        if thinking:
            blocks.append({"type": "thinking", "thinking": thinking, "signature": ""})
        if text:
            blocks.append({"type": "text", "text": text})
        blocks += [call.block() for call in tool_calls]
        if not blocks:
            raise UsageError("a model response needs text or tool calls")
        ids = [call.id for call in tool_calls]
        if len(set(ids)) != len(ids) or any(i in self._calls for i in ids):
            raise UsageError("tool call ids must be unique in a session")
        reason = stop_reason or ("tool_use" if tool_calls else "end_turn")

        def respond(s: Session) -> str:
            node = s.record_model_response(
                blocks=blocks,
                stop_reason=reason,
                usage=dict(usage or {}),
                provider=self._provider,
                model=model if model is not None else self._model,
            )
            for call in tool_calls:
                s.request_tool_call(
                    node=node, tool_use_id=call.id, name=call.name, input=dict(call.input)
                )
            return node

        node = self._record(respond)
        self._calls.update((call.id, call.name) for call in tool_calls)
        return node

    def permission(
        self, tool_use_id: str, allowed: bool, *, by: str = "user", reason: str | None = None
    ) -> None:
        """Who let a call run, or refused it (the audit trail shows it)."""
        name = self._call(tool_use_id)
        self._record(
            lambda s: s.decide_permission(
                tool_use_id=tool_use_id,
                tool=name,
                subject=name,
                decision="allow" if allowed else "deny",
                decided_by=by,
                reason=reason,
            )
        )

    def observe(self, *paths: str) -> None:
        """What the files hold now (before a tool of yours changes them): kept, so that a
        rewind can put them back."""
        known = self._known_files()
        for path in paths:
            digest, size = self._store(path, like=known.get(path))
            self._record(partial(Session.observe_file, path=path, hash=digest, size=size))
            known[path] = digest

    def tool_result(
        self,
        tool_use_id: str,
        output: str,
        *,
        is_error: bool = False,
        duration_ms: int = 0,
        files: Iterable[str] = (),
    ) -> str:
        """A tool call's result; ``files``: the workspace paths the call changed (read now)."""
        name = self._call(tool_use_id)
        known = self._known_files()
        changes: list[dict[str, Any]] = []
        for path in dict.fromkeys(files):
            after, _size = self._store(path, like=known.get(path))
            before = known.get(path)
            if before != after:
                changes.append({"path": path, "before": before, "after": after})
        node = self._record(
            lambda s: s.complete_tool_call(
                tool_use_id=tool_use_id,
                name=name,
                output=output,
                is_error=is_error,
                duration_ms=duration_ms,
                files_changed=changes,
            )
        )
        for change in changes:
            known[change["path"]] = change["after"]
        del self._calls[tool_use_id]
        return node

    def _call(self, tool_use_id: str) -> str:
        name = self._calls.get(tool_use_id)
        if name is None:
            msg = f"no tool call {tool_use_id!r} of a model response waits for its result"
            raise UsageError(msg)
        return name

    def _store(self, path: str, like: str | None = None) -> tuple[str | None, int | None]:
        """The file's content hash and size (None: absent), its content stored as a blob.
        Read without following links and never from ``.coder-es/`` or ``.git/hooks/``."""
        with ConfinedDir(self._workspace) as root:
            data = root.read(path)
        if data is None:
            return None, None
        blobs = self._app.blobs.for_session(self._session.id)
        return blobs.put(data, like=like), len(data)

    def _known_files(self) -> dict[str, str | None]:
        """The session's content of each path it touched, at its head."""
        if self._known is None:
            from projections.files import track_files

            states = track_files(self._app, self._session.id).open()
            # What the disk held after the session's last own change of each path.
            self._known = {**states.current_state(), **states.known}
        return self._known

    # ------------------------------------------------------------------ closing

    def close(self) -> None:
        """Release the session (calls still waiting for a result stay open in the log)."""
        lease, self._lease = self._lease, None
        if lease is not None:
            lease.release()

    def __enter__(self) -> OwnLoop:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
