"""A harness session: create or continue one, one turn at a time (the CLI's ``--harness``).

A new session's ``Started`` is recorded at the end of its first turn, when the harness has said
its own session id and version (``settings["harness"]``); every turn then records a
``HarnessRan`` with the id the next turn resumes (``claude --resume``, ``codex exec resume``,
``gemini --resume``). A session is run by the harness it was started with: another
``--harness`` is refused.

What a turn runs with is ``SessionSettings``, the projection native sessions use: a new
session's ``Started`` settings record the permission rules, default and hooks it starts with
(besides the harness), and a continued one records a ``SettingsChanged`` (another ``--agent``),
``PermissionsChanged`` (rules given again are appended, as for a native resume) and
``HooksChanged`` (other configured hooks) before its turn, so its settings are those of its log
plus the configuration (the sandbox's network and writable places).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID, uuid4

from coder_es.agent import updates as up
from coder_es.agent.settings import (
    DEFAULT_CONTEXT_BUDGET,
    RecordedHarness,
    SessionSettings,
    SettingsConfig,
    rule_records,
    rules_on_resume,
    same_rules,
)
from coder_es.domain.settings import RecordedSettings, recorded_settings
from coder_es.errors import UsageError
from coder_es.harness.adapters import ADAPTERS
from coder_es.harness.proxy import Upstream
from coder_es.harness.spec import HarnessSpec, continuing, package_version, resolve_command
from coder_es.harness.turn import HarnessFailed, HarnessTurn, TurnResult, hidden_paths
from coder_es.permissions.presets import get_preset
from coder_es.sandbox import SandboxSettings
from coder_es.secret_env import command_environ

if TYPE_CHECKING:
    from coder_es.application import CoderApp
    from coder_es.domain.session import Session
    from coder_es.harness.harness_hooks import HarnessHooks
    from coder_es.harness.resume import ResumePlan
    from coder_es.permissions.policy import PermissionAnswer

log = logging.getLogger(__name__)


@dataclass
class HarnessSession:
    store: CoderApp | Callable[[], CoderApp]
    """The application, or what opens it (``Context.app``): a new session's first turn opens
    it right after its harness's process has started (``HarnessTurn.store``)."""
    workspace: Path
    spec: HarnessSpec
    session_id: UUID
    agent: str = "build"
    yes: bool = False
    rules: tuple[Any, ...] = ()
    """The user's permission rules given to this run (``coder_es.permissions.rules.Rule``: the
    configuration's and the command line's): recorded with the session (its ``Started``
    settings, or appended to those in force); the rules in force decide a harness's questions
    first."""
    default_permission: str | None = None
    """The configured default (None: the one in force; "ask" for a new session)."""
    network: bool | None = None
    """``[sandbox] network``: None gives the harness's commands the network unless the agent is
    read-only (as for native bash)."""
    writable: tuple[Path, ...] = ()
    """``[sandbox] writable``: places outside the workspace the harness's commands may change."""
    title: str = ""
    # The harness and its commands get no coder-es variable or key value (secret_env).
    environ: Mapping[str, str] = field(default_factory=command_environ)
    store_path: Path | None = None
    turn_timeout_s: float = 1800.0
    hooks: tuple[Any, ...] | None = None
    """The configured hooks (``coder_es.hooks.HookSpec``), recorded with the session; None: those
    it recorded. The hooks in force of the events a harness session offers run before and after
    each turn (``harness_hooks``)."""
    exists: bool = False
    outcome: TurnResult | None = None
    serve: Upstream | None = None
    """Serve the harness's model requests from here instead of the real endpoint (replay,
    and a fork's rebuild: ``replay.harness``)."""
    discard: bool = False
    """Drop the turns' file changes (a rebuild of the harness's own state)."""
    _cancel: asyncio.Event | None = None

    @property
    def app(self) -> CoderApp:
        if callable(self.store):
            self.store = self.store()
        return self.store

    @classmethod
    def create(
        cls,
        app: CoderApp | Callable[[], CoderApp],
        workspace: Path,
        spec: HarnessSpec,
        **kw: Any,
    ) -> HarnessSession:
        if spec.kind not in ADAPTERS:
            msg = f"the {spec.kind} harness kind is not supported by run yet"
            raise UsageError(msg)
        get_preset(kw.get("agent", "build"))
        return cls(app, workspace.resolve(), spec, uuid4(), **kw)

    @classmethod
    def open(
        cls,
        app: CoderApp,
        workspace: Path,
        ref: str,
        spec: HarnessSpec | None,
        configured: Mapping[str, Mapping[str, Any]] | None = None,
        **kw: Any,
    ) -> HarnessSession:
        """Continue the harness session ``ref``; ``spec``: a ``--harness`` given again,
        ``configured``: the configuration's ``[harnesses]`` (``spec.continuing``)."""
        session = app.get_session(ref)
        recorded = RecordedHarness.of((session.settings or {}).get("harness"))
        if recorded is None:
            msg = f"session {session.id} is not a harness session; continue it without --harness"
            raise UsageError(msg)
        if Path(session.workspace).resolve() != workspace.resolve():
            msg = (
                f"session {session.id} belongs to the workspace {session.workspace}; run from there"
            )
            raise UsageError(msg)
        spec, changed = continuing(str(session.id), recorded, spec, configured)
        if changed is not None:
            log.warning("%s", changed)
        kw.setdefault("agent", session.agent)
        get_preset(kw["agent"])  # an unknown agent is refused before anything is recorded
        return cls(app, workspace.resolve(), spec, session.id, exists=True, **kw)

    @property
    def id(self) -> str:
        return str(self.session_id)

    def cancel(self) -> bool:
        if self._cancel is None or self._cancel.is_set():
            return False
        self._cancel.set()
        return True

    async def _rebuild(self, where: ResumePlan) -> str | None:
        """A fresh harness session holding the conversation up to the head: the recorded
        prompts given again, the recorded answers served, the files dropped
        (``coder_es.harness.resume``). Its id is what the live turn resumes."""
        from coder_es.application import CoderApp
        from coder_es.harness.serve import RequestNormalizer, ServingUpstream

        scratch = CoderApp(None)
        helper = HarnessSession(
            scratch,
            self.workspace,
            self.spec,
            uuid4(),
            agent=self.agent,
            network=self.network,
            environ=self.environ,
            store_path=self.store_path,
            turn_timeout_s=self.turn_timeout_s,
            discard=True,
        )
        requests = RequestNormalizer.for_paths(self.spec.kind, str(self.workspace))
        try:
            for n, turn in enumerate(where.rebuild, 1):
                served = ServingUpstream(
                    turn.exchanges,
                    requests,
                    on_mismatch=lambda _m: helper.cancel(),
                    strict=False,
                )
                helper.serve, helper.yes = served, turn.yes
                async for _update in helper.send(turn.prompt):
                    pass
                if served.mismatch is not None:
                    msg = (
                        f"cannot rebuild the {self.spec.name} harness's conversation up to "
                        f"{where.recorded_at}: in turn {n} it asked the model more than it did "
                        "when recorded (coder-es replay shows where it differs)"
                    )
                    raise HarnessFailed(msg)
        finally:
            scratch.close()
        return helper.outcome.harness_session if helper.outcome else None

    # ------------------------------------------------------------------ settings

    def settings_config(self) -> SettingsConfig:
        """What the configuration adds to the session's recorded settings: the sandbox's
        network and writable places; none of our tools (the harness runs its own)."""
        sandbox = SandboxSettings(mode="auto", network=self.network, writable=self.writable)
        return SettingsConfig(tools=None, sandbox=sandbox)

    def started_settings(self) -> dict[str, Any]:
        """A new session's ``Started`` settings: its harness, and the permissions and hooks
        it starts with (the harness's session id and version are added when it has run)."""
        settings: dict[str, Any] = {
            "harness": self.spec.to_settings(),
            "permissions": {
                "rules": rule_records(self.rules),
                "default": self.default_permission or "ask",
            },
        }
        if self.hooks:
            settings["hooks"] = [h.to_record() for h in self.hooks]
        return settings

    def settings_in_force(self) -> SessionSettings:
        """What the next turn runs with: a new session's from what its ``Started`` will
        record; a continued one's from its log, after recording what this run changes."""
        config = self.settings_config()
        if not self.exists:
            started = RecordedSettings(
                agent=self.agent,
                provider=f"harness:{self.spec.name}",
                started=self.started_settings(),
            )
            return SessionSettings.of(started, config)
        with self.app.leases.hold(self.id, "settings change"):
            recorded = recorded_settings(self.app.session_events(self.session_id))
            changes = self._changes(recorded)
            if changes:
                session = self.app.get_session(self.session_id)
                for change in changes:
                    change(session)
                self.app.save(session)
                recorded = recorded_settings(self.app.session_events(self.session_id))
        return SessionSettings.of(recorded, config)

    def _changes(self, recorded: RecordedSettings) -> list[Callable[[Session], None]]:
        """The settings events a continued session records for this run (none when the run
        asks for what is in force)."""
        changes: list[Callable[[Session], None]] = []
        if self.agent != recorded.agent:
            budget = recorded.context_budget() or DEFAULT_CONTEXT_BUDGET
            agent, provider, model = self.agent, recorded.provider, recorded.model
            changes.append(
                lambda s: s.change_settings(
                    agent=agent, provider=provider, model=model, context_budget=budget
                )
            )
        records, default = recorded.permission_records()
        wanted = rules_on_resume(records, self.rules)
        new_default = self.default_permission or default
        if not same_rules(wanted, records) or new_default != default:
            changes.append(lambda s: s.change_permissions(rules=wanted, default=new_default))
        if self.hooks is not None:
            hooks = [h.to_record() for h in self.hooks]
            if hooks != recorded.hook_records():
                changes.append(lambda s: s.change_hooks(hooks=hooks))
        return changes

    def _resume_id(self) -> str | None:
        from coder_es.domain.session import Session

        last: str | None = None
        for event in self.app.session_events(self.session_id):
            if isinstance(event, Session.HarnessRan) and event.harness_session:
                last = event.harness_session
            elif isinstance(event, Session.Started):
                last = (event.settings.get("harness") or {}).get("session_id") or last
        return last

    def _opened(self, version: str | None) -> up.SessionOpened:
        return up.SessionOpened(
            self.id,
            self.exists,
            self.agent,
            f"harness:{self.spec.name}",
            version or "",
            str(self.workspace),
        )

    async def send(
        self,
        prompt: str,
        ask: Callable[[up.PermissionRequired], Awaitable[PermissionAnswer]] | None = None,
    ) -> AsyncIterator[up.Update]:
        """One turn; ``ask``: an interactive run's user, asked what no rule settles."""
        if not prompt.strip():
            raise UsageError("the message is empty")
        adapter = ADAPTERS[self.spec.kind]()
        command = resolve_command(self.spec, {**self.environ, **self.spec.env})
        version = package_version(command[0], adapter.package)
        settings = self.settings_in_force()
        self.agent = settings.agent
        read_only = settings.policy.shell_read_only
        sandbox = settings.sandbox
        assert sandbox is not None  # ``settings_config`` gives one
        queue: asyncio.Queue[up.Update | None] = asyncio.Queue()
        self._cancel = asyncio.Event()
        new_session = None
        if not self.exists:
            new_session = {
                "workspace": str(self.workspace),
                "agent": self.agent,
                "provider": f"harness:{self.spec.name}",
                "title": self.title,
                "settings": dict(settings.recorded.started),
            }
        # A new session's first turn opens the store, and takes the session's lease, right after
        # its harness's process has started (``HarnessTurn.store``): the harness's own start-up
        # (hundreds of milliseconds) is not delayed by the store's modules and opening. Nothing
        # is applied or recorded before: a store that does not open stops the harness at once.
        # A continued session's store is open already (its log was read) and its lease is taken
        # before its harness starts, as are those of a turn whose hooks run before it.
        later = callable(self.store) and not self.exists and not settings.hooks
        with contextlib.ExitStack() as held:

            def opened() -> CoderApp:
                app = self.app
                held.enter_context(app.leases.hold(self.id, "harness turn"))
                return app

            turn = HarnessTurn(
                store=opened if later else self.app,
                session_id=self.session_id,
                workspace=self.workspace,
                spec=self.spec,
                adapter=adapter,
                command=command,
                emit=queue.put_nowait,
                environ=self.environ,
                read_only=read_only,
                yes=self.yes,
                agent=settings.agent,
                rules=settings.rules,
                default_permission=settings.default_permission,
                network=sandbox.network_on,
                writable=sandbox.writable,
                hidden=hidden_paths(self.workspace, self.store_path),
                turn_timeout_s=self.turn_timeout_s,
                version=version,
                new_session=new_session,
                cancelled=self._cancel,
                serve=self.serve,
                discard=self.discard,
                ask=ask,
            )
            resume, fork_at = None, None
            if self.exists:
                # Imported only to continue a session (the tree projection): a first turn's
                # harness starts without them (``run --harness`` start-up, bench/harness.py).
                from coder_es.harness.resume import plan

                where = plan(self.app, self.session_id, self.spec.kind)
                resume, fork_at = where.resume, where.fork_at
                if where.rebuild:
                    resume = await self._rebuild(where)
            turn.fork_at = fork_at
            if not later:
                opened()
            hooked: HarnessHooks | None = None
            if settings.hooks:
                # Imported only when hooks are in force: the hook runner brings the tools'
                # modules, which a turn without hooks does not need before its harness starts.
                from coder_es.harness.harness_hooks import HarnessHooks

                hooked = HarnessHooks(self, settings.hooks, read_only)
                sent = await hooked.before(prompt)
                if sent is None:
                    yield self._opened(version)
                    for shown in hooked.updates:
                        yield shown
                    return
                turn._ops.extend(hooked.ops)
                hooked.ops.clear()
                turn.user_prompt = sent

            async def run() -> TurnResult:
                try:
                    return await turn.run(prompt, resume)
                finally:
                    turn.started.set()
                    queue.put_nowait(None)

            task = asyncio.ensure_future(run())
            try:
                # Nothing is shown before the harness's process is started (or the turn ended
                # without it): what the caller does with the first update (a renderer's
                # imports) overlaps the harness's own start-up, not precedes it.
                await turn.started.wait()
                if turn.unopened is not None:
                    await task  # the store did not open: its error, and nothing shown
                yield self._opened(version)
                if hooked is not None:
                    for shown in hooked.updates:
                        yield shown
                    hooked.updates.clear()
                while (update := await queue.get()) is not None:
                    yield update
                self.outcome = await task
                self.exists = True
                if hooked is not None:
                    await hooked.after(self.outcome)
                    for shown in hooked.updates:
                        yield shown
            finally:
                if not task.done():
                    self._cancel.set()
                    await asyncio.gather(task, return_exceptions=True)
