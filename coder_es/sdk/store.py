"""``open_store`` and ``Store``: the sessions of one workspace, and what can be done with them.

A thin facade: sessions run through ``coder_es.service.api.AgentService`` (as ``coder-es run``
runs them), moves through ``coder_es.branching.Branching``, exports and checks through
``coder_es.audit``, search through ``projections.search``, cassettes through ``replay``. Nothing
here decides anything those layers do not.

The store opens where the CLI's does by default (``WORKSPACE/.coder-es``, LMDB), so a session
started here is listed, resumed, exported and replayed by ``coder-es`` as well. One open store per
process records sessions (``Session.sealing`` is still process-wide; issue 36.2).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from coder_es.errors import UsageError

if TYPE_CHECKING:
    from coder_es.application import CoderApp
    from coder_es.audit.problems import VerifyReport
    from coder_es.branching import Branching, LabelMove, MoveResult
    from coder_es.permissions.rules import Rule
    from coder_es.providers.base import Provider
    from coder_es.sandbox import SandboxSettings
    from coder_es.sdk.own_loop import OwnLoop
    from coder_es.sdk.session import Session
    from coder_es.service.api import AgentService
    from coder_es.summaries import SessionSummary
    from coder_es.tools.base import Tool
    from projections.search.query import Hit
    from projections.tree import ConversationTree

BACKEND_ALIASES = {"memory": "popo"}


def open_store(
    workspace: str | Path = ".",
    *,
    backend: str = "lmdb",
    path: str | Path | None = None,
    durable: bool = True,
    redact_env_vars: Sequence[str] = (),
    redact_patterns: Sequence[str] = (),
    postgres: Mapping[str, str] | None = None,
) -> Store:
    """Open (creating if need be) the store of ``workspace``.

    ``backend``: ``lmdb`` (the default), ``sqlite``, ``postgres`` (``postgres``: the
    ``POSTGRES_*`` settings) or ``memory`` (nothing is kept). ``path``: the store directory
    (default ``WORKSPACE/.coder-es``, where ``coder-es`` looks). Secrets are redacted as the CLI
    redacts them: the environment's, plus ``redact_env_vars`` (variable names or globs) and
    ``redact_patterns`` (regular expressions).
    """
    from coder_es.application import CoderApp
    from coder_es.redaction import Redactor
    from coder_es.store.config import StoreConfig

    root = Path(workspace).resolve()
    if not root.is_dir():
        msg = f"the workspace {root} is not a directory"
        raise UsageError(msg)
    where = Path(path) if path is not None else root / ".coder-es"
    if not where.is_absolute():
        where = root / where
    config = StoreConfig(
        backend=BACKEND_ALIASES.get(backend, backend),
        path=where,
        durable=durable,
        extra=dict(postgres or {}),
    )
    redactor = Redactor.with_settings(redact_env_vars, redact_patterns)
    return Store(CoderApp(config, redactor=redactor), root)


class Store:
    """The sessions of one workspace on one store. Close it (or use ``with`` /
    ``async with``, which also closes the sessions still open)."""

    def __init__(self, app: CoderApp, workspace: Path) -> None:
        self._app = app
        self.workspace = workspace
        self._sessions: dict[str, Session] = {}
        self._branching: Branching | None = None

    # ------------------------------------------------------------------ sessions

    def sessions(self, *, archived: bool | None = False) -> list[SessionSummary]:
        """The store's sessions, oldest first (``archived=None``: archived ones too)."""
        return self._app.list_sessions(archived=archived)

    def events(self, session: str) -> list[Any]:
        """The session's events as stored (secrets sealed), in order."""
        return self._app.session_events(self._app.resolve_session(session))

    async def start(
        self,
        provider: Provider,
        *,
        tools: Sequence[Tool[Any]] = (),
        rules: Sequence[Rule] = (),
        agent: str = "build",
        default_permission: str = "ask",
        title: str = "",
        max_steps: int = 50,
        sandbox: SandboxSettings | None = None,
    ) -> Session:
        """Start a session run by ``provider`` (a ``ScriptedProvider``, or ``provider(...)``).

        ``tools``: tools of your own besides the built-in ones; each is offered to the model
        (a rule of yours decides whether it asks; without one it asks). ``rules``: ``allow``,
        ``ask``, ``deny``; the last match wins. ``agent``: the preset (``build``, ``plan``,
        ``explore``) deciding the built-in tools and rules.
        """
        service, options = self._service(
            provider, tools, rules, agent, default_permission, title, max_steps, sandbox
        )
        return self._opened(await service.create_session(options))

    async def resume(
        self,
        session: str,
        provider: Provider | None = None,
        *,
        tools: Sequence[Tool[Any]] = (),
        rules: Sequence[Rule] = (),
        agent: str | None = None,
        default_permission: str | None = None,
        max_steps: int = 50,
        sandbox: SandboxSettings | None = None,
    ) -> Session:
        """Open a recorded session to continue it (a prefix of its id or a label's session).

        ``provider``: None builds the one the session recorded, from the environment's keys.
        Other ``rules``, ``agent`` or provider are recorded as the session's settings from now
        on (``PermissionsChanged``, ``SettingsChanged``), as ``coder-es run --session`` does.
        """
        service, options = self._service(
            provider, tools, rules, agent, default_permission, "", max_steps, sandbox
        )
        return self._opened(await service.open_session(session, options))

    def _service(
        self,
        provider: Provider | None,
        tools: Sequence[Tool[Any]],
        rules: Sequence[Rule],
        agent: str | None,
        default_permission: str | None,
        title: str,
        max_steps: int,
        sandbox: SandboxSettings | None,
    ) -> tuple[AgentService, Any]:
        from coder_es.permissions.rules import Rule as RuleClass
        from coder_es.sdk.rules import API_SOURCE, check_rules
        from coder_es.service.api import AgentService, SessionOptions, default_provider_factory
        from coder_es.tools.registry import ToolRegistry, default_registry

        if max_steps < 1:
            raise UsageError("max_steps must be at least 1")
        check_rules(rules, (t.name for t in tools))
        registry = default_registry()
        for tool in tools:
            if registry.get(tool.name) is not None:
                registry = registry.replaced(tool)
            else:
                registry = ToolRegistry([*_tools_of(registry), tool])
        # A tool of the caller's is offered when a rule names it (``Policy.tools``): one that
        # no rule names asks, as a call no rule covers would.
        named = {r.tool for r in rules}
        extra = tuple(
            RuleClass(t.name, None, "ask", API_SOURCE) for t in tools if t.name not in named
        )
        options = SessionOptions(
            agent=agent,
            provider=provider.name if provider is not None else None,
            model=provider.model if provider is not None else None,
            rules=(*extra, *rules),
            max_steps=max_steps,
            title=title,
            default_permission=default_permission,
        )
        return (
            AgentService(
                self._app,
                self.workspace,
                provider_factory=_factory(provider, default_provider_factory()),
                tools=registry,
                sandbox=sandbox,
            ),
            options,
        )

    def _opened(self, handle: Any) -> Session:
        from coder_es.sdk.session import Session

        session = Session(handle, self._forget)
        self._sessions[session.id] = session
        return session

    def _forget(self, session: Session) -> None:
        self._sessions.pop(session.id, None)

    def own_loop(
        self,
        session: str | None = None,
        *,
        provider: str = "own-loop",
        model: str = "",
        title: str = "",
        agent: str = "build",
    ) -> OwnLoop:
        """Record the turns of an agent loop of your own as this store's events (a new session,
        or ``session`` continued): see ``OwnLoop``."""
        from coder_es.sdk.own_loop import OwnLoop

        return OwnLoop.open(
            self._app,
            self.workspace,
            session,
            provider=provider,
            model=model,
            title=title,
            agent=agent,
        )

    # ------------------------------------------------------------------ the tree

    def _moves(self) -> Branching:
        if self._branching is None:
            from coder_es.branching import Branching

            self._branching = Branching(self._app, self.workspace)
        return self._branching

    def tree(self, session: str) -> ConversationTree:
        """The session's conversation tree: nodes, branches, labels, its head."""
        return self._moves().tree(session)

    def fork(
        self, session: str, node: str | None = None, *, new_session: bool = False
    ) -> MoveResult:
        """Branch off at ``node`` (default: the head): the head moves there and the files are
        restored to what they were; the next message starts a new branch. With
        ``new_session``, a new session forked from it instead (``result.session`` is its id)."""
        return self._moved(self._moves().fork(session, node, new_session=new_session))

    def checkout(self, session: str, node: str) -> MoveResult:
        """Move the head to ``node`` (any branch) and restore its files."""
        return self._moved(self._moves().checkout(session, node))

    def rewind(
        self, session: str, node: str, *, conversation: bool = True, files: bool = True
    ) -> MoveResult:
        """Go back along the current branch: the conversation, the files, or both."""
        return self._moved(
            self._moves().rewind(session, node, conversation=conversation, files=files)
        )

    def label(self, session: str, node: str, name: str) -> LabelMove:
        """Name a node (a label that named another node moves to this one)."""
        return self._moves().label(session, node, name)

    def _moved(self, result: MoveResult) -> MoveResult:
        # A session open here caches its head: it reads the moved one.
        for sid in {result.session, *(result.forked_from or ())}:
            open_session = self._sessions.get(sid)
            if open_session is not None:
                open_session.reload()
        return result

    # ------------------------------------------------------------------ audit, search, replay

    def export(
        self,
        session: str,
        format: str = "jsonl",
        *,
        redact_globs: Sequence[str] = (),
        children: bool = True,
    ) -> bytes:
        """The session's audit trail: ``jsonl`` (verifiable), ``otel``, ``md`` or ``html``."""
        from coder_es.audit.export import ExportOptions, export_session

        options = ExportOptions(format=format, redact_globs=tuple(redact_globs), children=children)
        return export_session(self._app, session, options)

    def verify(self, session: str | None = None) -> VerifyReport:
        """Check a session's hash chain and blobs (``None``: every session of the store)."""
        from coder_es.audit.verify import verify_session, verify_store

        if session is None:
            return verify_store(self._app)
        return verify_session(self._app, session)

    def search(
        self,
        query: str,
        *,
        session: str | None = None,
        kind: str | None = None,
        limit: int = 20,
    ) -> list[Hit]:
        """Full-text search over every session (the index catches up with the log first)."""
        from projections.search import Filters, open_index, search

        filters = Filters(
            session=str(self._app.resolve_session(session)) if session else None,
            kind=kind,
            limit=limit,
        )
        index = open_index(self._app)
        try:
            return search(self._app, index, query, filters)
        finally:
            index.close()

    def record_cassette(
        self, session: str, path: str | Path, *, include_workspace: bool = True
    ) -> Path:
        """Write the session as a cassette (``replay_cassette`` replays it, offline)."""
        from replay.cassette import export_session, write_cassette

        cassette = export_session(
            self._app,
            session,
            redactor=self._app.sealing.redactor,
            include_workspace=include_workspace,
        )
        return write_cassette(cassette, path)

    # ------------------------------------------------------------------ closing

    def close(self) -> None:
        """Close the store (sessions still open are cancelled and left as recorded)."""
        for session in list(self._sessions.values()):
            session.cancel("the store was closed")
        if self._branching is not None:
            self._branching.checkpoint()
        self._app.close()

    async def aclose(self) -> None:
        """Close the sessions still open, then the store."""
        await asyncio.gather(*(s.close() for s in list(self._sessions.values())))
        self.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def _tools_of(registry: Any) -> Iterable[Any]:
    return (registry.get(n) for n in registry.names())


def _factory(
    given: Provider | None, fallback: Callable[[str, str], Provider]
) -> Callable[[str, str], Provider]:
    """The provider the caller gave for its own name and model; any other (a subagent's, a
    session's recorded one) built from the environment."""

    def factory(name: str, model: str) -> Provider:
        if given is not None and name == given.name and model in ("", given.model):
            return given
        return fallback(name, model)

    return factory
