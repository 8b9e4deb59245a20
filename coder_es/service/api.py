"""The service API: sessions, turns as async streams of updates, permission answers, cancellation.

Used by the CLI and by clients (ACP agent, WebSocket server)::

    service = AgentService(app, workspace)
    handle = await service.create_session(SessionOptions(provider="anthropic", model="..."))
    async for update in handle.send("fix the failing test"):
        if isinstance(update, PermissionRequired):
            await handle.answer(update.tool_use_id, PermissionAnswer.allow_once("client"))
        ...
    handle.cancel()            # from anywhere (a signal handler, another task)
    await handle.close()

A turn's updates end with ``TurnEnded``; errors inside the loop that are not the model's or a
tool's (a bug, a session written by another process) are raised from the iterator after the
updates that came before them.

Permission answers: by default a ``PermissionRequired`` update waits for ``handle.answer``; pass
``answerer=`` to ``send``/``resume`` to answer programmatically instead (``auto_answerer`` for
non-interactive runs, a recording for replay).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import uuid4

from coder_es.agent import updates as up
from coder_es.agent.decider import DecisionContext, parked_in_the_way
from coder_es.agent.prompt import record_prompt
from coder_es.agent.runner import (
    AgentLoop,
    Clock,
    HookRunner,
    LoopConfig,
    LoopDeps,
    PermissionAnswerer,
    SystemClock,
    TurnOutcome,
)
from coder_es.agent.settings import (
    SessionSettings,
    SettingsConfig,
    rule_records,
    rules_on_resume,
    same_rules,
    with_recorded_tools,
)
from coder_es.application import CoderApp
from coder_es.config.values import Config, McpServerConfig
from coder_es.domain.session import Session
from coder_es.domain.settings import RecordedSettings
from coder_es.errors import UsageError
from coder_es.hooks.spec import HookSpec
from coder_es.mcp.tool import McpSource
from coder_es.permissions.policy import PermissionAnswer, Policy
from coder_es.permissions.presets import get_preset
from coder_es.permissions.rules import Rule
from coder_es.permissions.subagents import AgentDefinition
from coder_es.providers.base import Provider
from coder_es.providers.catalogue import ModelCatalogue
from coder_es.providers.factory import build_provider
from coder_es.providers.images import ImageInput, check_images
from coder_es.providers.scripted import ScriptedProvider
from coder_es.sandbox import SandboxSettings
from coder_es.service.tasks import TaskRunner
from coder_es.store.lease import Lease
from coder_es.tools.offered import offered_agents, session_registry
from coder_es.tools.registry import LocalExecutor, ToolExecutor, ToolRegistry, default_registry
from coder_es.tools.with_input import keep_prepared, release

ProviderFactory = Callable[[str, str], Provider]


@dataclass(frozen=True)
class SessionOptions:
    """How to run a session. ``None`` means: what the session recorded (or the default)."""

    agent: str | None = None
    provider: str | None = None
    model: str | None = None
    rules: tuple[Rule, ...] = ()
    max_steps: int = 50
    title: str = ""
    default_permission: str | None = None
    """The action when no rule covers a call: allow, ask or deny (None: the session's, or ask)."""
    settings: Mapping[str, Any] = field(default_factory=dict)
    """Extra settings recorded in a new session's Started event (e.g. a client's MCP servers)."""
    mcp_servers: tuple[McpServerConfig, ...] = ()
    """MCP servers for this session only, besides the service's (an ACP client's)."""
    message_follows: bool = False
    """A message is sent once the session is open (``run --session S PROMPT``, a job's prompt):
    a session whose parked turn stands in its way (``decider.parked_in_the_way``) is refused
    as it opens, before any settings change is recorded. (The loop refuses it again under the
    lease, for every other way a message comes.)"""


def default_provider_factory(env: Mapping[str, str] | None = None) -> ProviderFactory:
    def factory(name: str, model: str) -> Provider:
        return build_provider(name, model, env=os.environ if env is None else env)

    return factory


def configured_provider_factory(config: Config) -> ProviderFactory:
    """Providers built with the configuration's ``[providers.NAME]`` base URL and API key."""
    from coder_es.config.provider_env import provider_environ

    def factory(name: str, model: str) -> Provider:
        return build_provider(name, model, env=provider_environ(config, name))

    return factory


def auto_answerer(yes: bool, defer: bool = False) -> PermissionAnswerer:
    """Non-interactive answers: ``yes`` allows once; ``defer`` parks every question (the turn
    waits for ``coder-es approve`` / ``deny`` from any process); otherwise every ask is
    rejected, saying why."""

    async def answer(question: up.PermissionRequired) -> PermissionAnswer:
        if yes:
            return PermissionAnswer.allow_once(decided_by="user")
        if defer:
            return PermissionAnswer.defer("run --defer")
        return PermissionAnswer.reject(
            f"{question.tool} needs permission ({question.reason}) and this run is "
            "non-interactive; rerun with --yes or --allow "
            f"'{question.tool}:{question.suggested_pattern}' to allow it",
            decided_by="client",
        )

    return answer


class SessionHandle:
    """One open session. Run one turn at a time."""

    def __init__(self, loop: AgentLoop, provider: Provider, *, resumed: bool) -> None:
        self.loop = loop
        self.mcp = loop.deps.mcp
        self.provider = provider
        self.resumed = resumed
        self._task: asyncio.Task[TurnOutcome] | None = None
        self._questions: dict[str, asyncio.Future[PermissionAnswer]] = {}
        self._pending_permissions: tuple[tuple[Rule, ...], str] | None = None
        self._lease: Lease | None = None
        self.outcome: TurnOutcome | None = None

    @property
    def id(self) -> str:
        return self.loop.session_id

    def opened(self) -> up.SessionOpened:
        # The provider this run uses: a resume may name another one (or another script) than
        # the session started with.
        return up.SessionOpened(
            self.id,
            self.resumed,
            self.loop.deps.decision.policy.preset.name,
            self.provider.name,
            self.provider.model,
            self.loop.state.workspace,
        )

    def reload(self) -> None:
        """Read the session's events again, after a fork, switch or rewind moved its head.

        The loop caches the session; a new one starts from the moved head. The provider is kept,
        so a scripted one goes on with its next turn instead of starting its script again.
        """
        if self.running:
            msg = f"session {self.id} is running a turn; it cannot be reloaded now"
            raise UsageError(msg)
        self._load_again()

    def _load_again(self) -> None:
        old = self.loop
        self.loop = AgentLoop(old.app, old.session.id, old.deps, emit=old.emit, config=old.config)
        self.loop.client = old.client

    @contextlib.contextmanager
    def leased(self, purpose: str) -> Iterator[None]:
        """Hold the session's lease (one writer per session) for what runs inside.

        Raises ``SessionBusyError`` at once if another process or handle holds it. Whatever
        another writer recorded since this handle loaded the session is loaded first, so the
        next event follows it instead of colliding with it. Re-entrant within the handle.
        """
        if self._lease is not None:
            yield
            return
        self._lease = self.loop.app.leases.acquire(self.id, purpose)
        try:
            if self.loop.app.last_version(self.loop.session.id) != self.loop.session.version:
                self._load_again()
            yield
        finally:
            lease, self._lease = self._lease, None
            lease.release()

    # ------------------------------------------------------------------ turns

    def send(
        self,
        text: str,
        *,
        images: Sequence[ImageInput] = (),
        answerer: PermissionAnswerer | None = None,
    ) -> AsyncIterator[up.Update]:
        """Send a user message. ``images``: each the bytes of a PNG/JPEG/GIF/WebP image, or
        ``(media_type, bytes)`` (an ACP image block's ``mimeType`` and decoded ``data``); the
        media type is sniffed from the bytes. A bad image raises ``ImageError`` (a UsageError)."""
        if not text.strip() and not images:
            msg = "the message is empty"
            raise UsageError(msg)
        check_images(images)  # a bad image is the caller's error, before the turn starts
        return self._updates(lambda: self.loop.send(text, images), answerer)

    def resume(self, *, answerer: PermissionAnswerer | None = None) -> AsyncIterator[up.Update]:
        """Continue an interrupted turn (after a crash) without a new message."""
        self._continue_script()
        return self._updates(lambda: self.loop.resume(), answerer)

    def _continue_script(self) -> None:
        """A script resumed by the same "model" (its file) goes on after the responses it
        already gave in this turn: played again, they would repeat tool calls that completed
        (a real model sees their results and moves on)."""
        provider = self.provider
        if not isinstance(provider, ScriptedProvider) or provider.by_step:
            return
        events = self.loop.app.session_events(self.loop.session.id)
        by_node = {str(e.originator_version): e for e in events if isinstance(e, Session.NodeEvent)}
        node, played = self.loop.session.head, []
        while node is not None and node in by_node:
            event = by_node[node]
            if isinstance(event, Session.UserMessageAdded):
                break
            if isinstance(event, Session.ModelResponded):
                if event.model != provider.model:
                    return  # another model answered in this turn
                played.append(event.blocks)
            node = event.parent
        provider.continue_after(played[::-1])

    async def _updates(
        self, start: Callable[[], Awaitable[TurnOutcome]], answerer: PermissionAnswerer | None
    ) -> AsyncIterator[up.Update]:
        if self._task is not None:
            msg = f"session {self.id} is already running a turn"
            raise UsageError(msg)
        # The turn (and its task) is closed before the lease is released, even when the
        # caller stops reading early.
        with self.leased("turn"):
            async with contextlib.aclosing(self._turn(start, answerer)) as turn:
                async for update in turn:
                    yield update

    async def _turn(
        self, start: Callable[[], Awaitable[TurnOutcome]], answerer: PermissionAnswerer | None
    ) -> AsyncGenerator[up.Update, None]:
        queue: asyncio.Queue[up.Update | None] = asyncio.Queue()
        self.loop.emit = queue.put_nowait
        self.loop.deps.answerer = answerer or self._ask_client

        async def run() -> TurnOutcome:
            try:
                return await start()
            finally:
                queue.put_nowait(None)

        # The turn's hooks may run in sandboxes prepared ahead, released when it ends (a
        # prepared sandbox never outlives the turn, nor the event loop that runs it).
        keep_prepared(self.loop.tool_cache)
        task = asyncio.create_task(run())
        self._task = task
        try:
            yield self.opened()
            while (update := await queue.get()) is not None:
                yield update
            self.outcome = await task
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            self._task = None
            with contextlib.suppress(Exception):
                await release(self.loop.tool_cache)
            for future in self._questions.values():
                future.cancel()
            self._questions.clear()
            self._apply_pending_permissions()

    def cancel(self, reason: str = "cancelled by the user") -> bool:
        """Cancel the running turn (the stream and any running tools). False if none runs."""
        if self._task is None or self._task.done():
            return False
        self.loop.cancel_reason = reason
        self._task.cancel()
        return True

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    # ------------------------------------------------------------------ permissions

    async def _ask_client(self, question: up.PermissionRequired) -> PermissionAnswer:
        future: asyncio.Future[PermissionAnswer] = asyncio.get_running_loop().create_future()
        self._questions[question.tool_use_id] = future
        try:
            return await future
        finally:
            self._questions.pop(question.tool_use_id, None)

    @property
    def pending_questions(self) -> list[str]:
        return list(self._questions)

    async def answer(self, tool_use_id: str, answer: PermissionAnswer) -> None:
        future = self._questions.get(tool_use_id)
        if future is None or future.done():
            msg = f"no permission question is waiting for tool call {tool_use_id!r}"
            raise UsageError(msg)
        future.set_result(answer)

    def update_permissions(self, rules: Sequence[Rule], default: str) -> bool:
        """Make ``rules`` and ``default`` the session's user rules (a config reload).

        Recorded as a ``PermissionsChanged`` when they differ from the rules in force. Never in
        the middle of a turn: while one runs, the change waits for its end (the last one wins).
        Returns whether it was recorded now.
        """
        if default not in ("allow", "ask", "defer", "deny"):
            msg = f"the default permission must be allow, ask, defer or deny, not {default!r}"
            raise UsageError(msg)
        if self.running:
            self._pending_permissions = (tuple(rules), default)
            return False
        self._pending_permissions = None
        return self._change_permissions(rule_records(rules), default)

    def _change_permissions(self, records: list[dict[str, Any]], default: str) -> bool:
        rules, current = self.loop.state.permissions_in_force()
        if same_rules(records, rules) and default == current:
            return False
        with self.leased("permission change"):
            rules, current = self.loop.state.permissions_in_force()
            if same_rules(records, rules) and default == current:
                return False  # another writer recorded the same change meanwhile
            self.loop.change_permissions(records, default)
        return True

    def change_settings(
        self, *, agent: str, provider: str, model: str, context_budget: int
    ) -> bool:
        """Record what the session runs with from now on (``SettingsChanged``) when it differs
        from the settings in force; the loop follows (the preset's tools and rules, the
        budget). The provider object itself is the caller's: ``AgentService.open_session``
        builds the one the new settings name. Refused while a turn runs."""
        st = self.loop.state
        budget = st.context_budget or self.loop.config.context_budget
        if (agent, provider, model, context_budget) == (st.agent, st.provider, st.model, budget):
            return False
        if self.running:
            msg = f"session {self.id} is running a turn; cancel it before changing its settings"
            raise UsageError(msg)
        with self.leased("settings change"):
            self.loop.change_settings(
                agent=agent, provider=provider, model=model, context_budget=context_budget
            )
        return True

    def _apply_pending_permissions(self) -> None:
        pending, self._pending_permissions = self._pending_permissions, None
        if pending is not None:
            self._change_permissions(rule_records(pending[0]), pending[1])

    async def end(self, reason: str = "other") -> None:
        """The session ends here (``run``, ``chat``): its SessionEnd hooks run, recorded."""
        if self.running:
            return
        with self.leased("session end"):
            await self.loop.end_session(reason)

    async def close(self) -> None:
        self.cancel("session closed")
        await release(self.loop.tool_cache)
        await self.provider.aclose()
        if self.mcp is not None:
            # Stdio servers are stopped with the session (processes never outlive it).
            await self.mcp.aclose()


class AgentService:
    """Creates and opens sessions of one workspace on one store."""

    def __init__(
        self,
        app: CoderApp,
        workspace: str | Path,
        *,
        provider_factory: ProviderFactory | None = None,
        tools: ToolRegistry | None = None,
        executor: ToolExecutor | None = None,
        clock: Clock | None = None,
        config: LoopConfig | None = None,
        sandbox: SandboxSettings | None = None,
        mcp_servers: Iterable[McpServerConfig] = (),
        mcp_factory: Callable[[Sequence[McpServerConfig]], McpSource | None] | None = None,
        models: ModelCatalogue | None = None,
        agents: Mapping[str, AgentDefinition] | None = None,
        hooks: Sequence[HookSpec] | None = None,
        hook_runner: HookRunner | None = None,
    ) -> None:
        self.app = app
        # The configured hooks (None: run each session by the hooks it recorded, as a replay
        # does); recorded in a new session's settings, and as a HooksChanged when a session
        # opens under other ones.
        self.hooks = None if hooks is None else tuple(hooks)
        self.hook_runner = hook_runner
        self.sandbox = sandbox
        self.workspace = Path(workspace).resolve()
        self.provider_factory = provider_factory or default_provider_factory()
        # ``task`` offers the built-in subagents and ``agents`` (config ``[agents.NAME]``).
        self.tools = tools or default_registry(agents)
        self.executor = executor or LocalExecutor(self.tools)
        self.clock = clock or SystemClock()
        self.config = config or LoopConfig()
        self.mcp_servers = tuple(mcp_servers)
        self.mcp_factory = mcp_factory or _mcp_manager
        self.models = models or ModelCatalogue.bundled()

    def _settings_config(self) -> SettingsConfig:
        """What the service's configuration adds to a session's recorded settings."""
        return SettingsConfig(
            tools=self.tools,
            context_budget=self.config.context_budget,
            max_tokens=self.config.max_tokens,
            sandbox=self.sandbox,
        )

    def context_budget(self, model: str) -> int:
        """Input tokens a request to ``model`` may hold: its context window (from the model
        catalogue) less the tokens reserved for the answer."""
        return self.models.info(model).context_budget(self.config.max_tokens)

    def _handle(
        self,
        session_id: Any,
        provider: Provider,
        policy: Policy,
        options: SessionOptions,
        resumed: bool,
        context_budget: int,
        settings: Mapping[str, Any],
    ) -> SessionHandle:
        deps = LoopDeps(
            provider=provider,
            executor=self.executor,
            answerer=auto_answerer(False),
            decision=DecisionContext(
                session_registry(self.tools, settings), policy, options.max_steps
            ),
            clock=self.clock,
            sandbox=self.sandbox,
            mcp=self.mcp_factory((*self.mcp_servers, *options.mcp_servers)),
            spawner=TaskRunner(self.provider_factory),
            hook_runner=self.hook_runner,
        )
        config = LoopConfig(
            max_steps=options.max_steps,
            max_tokens=self.config.max_tokens,
            output_limit=self.config.output_limit,
            model_retries=self.config.model_retries,
            retry_delay_s=self.config.retry_delay_s,
            context_budget=context_budget,
        )
        loop = AgentLoop(self.app, session_id, deps, config=config)
        return SessionHandle(loop, provider, resumed=resumed)

    async def create_session(self, options: SessionOptions | None = None) -> SessionHandle:
        options = options or SessionOptions()
        agent = options.agent or "build"
        policy = Policy.for_agent(agent, options.rules, options.default_permission or "ask")
        provider_name = options.provider or "scripted"
        provider = self.provider_factory(provider_name, options.model or "")
        # The prompt may quote a secret from an instruction file: sealed in the session's scope.
        session_id = uuid4()
        prompt_blobs = self.app.blobs.for_session(session_id)
        settings = await asyncio.to_thread(record_prompt, self.workspace, prompt_blobs)
        settings["permissions"] = policy.to_settings()
        # The subagents ``task`` offers (a session without this record was started before
        # they existed: its replay is offered the tools it was).
        settings["subagents"] = self.tools.get("task") is not None
        # And which agents it lists: a resume or replay offers these, not the config's of then.
        agents = offered_agents(self.tools)
        if agents is not None:
            settings["agents"] = agents
        settings["max_tokens"] = self.config.max_tokens
        # The step limit changes what the loop decides, so replay must see the one used.
        settings["max_steps"] = options.max_steps
        # The budget decides what the requests hold: recorded so a replay (or a resume after the
        # catalogue changed) builds the same requests.
        budget = self.context_budget(provider.model)
        settings["context_budget"] = budget
        if self.hooks:
            settings["hooks"] = [h.to_record() for h in self.hooks]
        settings.update(options.settings)
        policy = dataclasses.replace(policy, preset=with_recorded_tools(policy.preset, settings))
        session = self.app.start_session(
            workspace=str(self.workspace),
            agent=agent,
            provider=provider_name,
            model=provider.model,
            title=options.title,
            settings=settings,
            id=session_id,
        )
        return self._handle(session.id, provider, policy, options, False, budget, settings)

    async def open_session(
        self, session_ref: str, options: SessionOptions | None = None
    ) -> SessionHandle:
        options = options or SessionOptions()
        session = self.app.get_session(session_ref)
        if Path(session.workspace).resolve() != self.workspace:
            msg = (
                f"session {session.id} belongs to the workspace {session.workspace}, not "
                f"{self.workspace}; run from there or pass --workspace"
            )
            raise UsageError(msg)
        # The session's agent, provider and model are those in force (its last
        # SettingsChanged, else its Started ones); options name other ones to change to.
        agent = options.agent or session.agent
        get_preset(agent)  # an unknown agent is refused before anything is recorded
        # What the aggregate knows: the agent in force and the Started settings; the loop, as
        # it loads the events, moves to the rules of the last PermissionsChanged and so on.
        known = RecordedSettings(
            agent=session.agent,
            provider=session.provider,
            model=session.model,
            started=session.settings,
        )
        start = SessionSettings.of(known, self._settings_config())
        provider_name = options.provider or session.provider
        provider = self.provider_factory(provider_name, options.model or session.model)
        handle = self._handle(
            session.id,
            provider,
            start.policy,
            options,
            True,
            start.context_budget,
            session.settings,
        )
        # Loading the session applied every settings event: its settings in force.
        state = handle.loop.state
        refused = parked_in_the_way(state, str(session.id)) if options.message_follows else None
        if refused is not None:
            await handle.close()
            raise UsageError(refused)
        if provider.model != state.model:
            budget = self.context_budget(provider.model)  # another model, another window
        else:
            budget = SessionSettings.of(state.recorded, self._settings_config()).context_budget
        try:
            # Another agent, provider or model: recorded, so that the next resume, another
            # client and a replay see the session as it now runs.
            handle.change_settings(
                agent=agent, provider=provider_name, model=provider.model, context_budget=budget
            )
        except BaseException:
            await handle.close()
            raise
        records, default = handle.loop.state.permissions_in_force()
        # Among user rules the last match wins: the command line's go after those in force.
        wanted = rules_on_resume(records, options.rules)
        handle._change_permissions(wanted, options.default_permission or default)
        if self.hooks is not None:
            records = [h.to_record() for h in self.hooks]
            if records != handle.loop.state.hooks_in_force():
                with handle.leased("hooks change"):
                    handle.loop.change_hooks(records)
        return handle


def _mcp_manager(servers: Sequence[McpServerConfig]) -> McpSource | None:
    # Started lazily: nothing runs until a turn asks for the tools.
    from coder_es.mcp.manager import McpManager

    return McpManager(servers) if servers else None
