"""What the ACP agent and the WebSocket server share: the store, the provider choice, one
``AgentService`` per workspace, and the configuration with hot reload.

The configuration is applied on reload without a restart: permission rules for the open
sessions (from their next turn; each change is recorded as a ``PermissionsChanged``) and for those
opened from then on, the provider for sessions opened from then on, and the server's approval
filters for the next question. Store settings need a restart (the reload says so).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from coder_es.agent.runner import Clock
from coder_es.application import CoderApp
from coder_es.clients.filters import ApprovalFilter
from coder_es.config import Config, ConfigError, ConfigWatcher, Overrides, changed_sections
from coder_es.errors import CoderESError, UsageError
from coder_es.permissions.policy import UNTRUSTED_SOURCE
from coder_es.permissions.rules import Rule, configured_rule
from coder_es.providers.errors import ProviderConfigError
from coder_es.providers.factory import SCRIPT_ENV
from coder_es.providers.script_file import resolve_script
from coder_es.sandbox import SandboxSettings
from coder_es.service.api import (
    AgentService,
    ProviderFactory,
    SessionHandle,
    SessionOptions,
    configured_provider_factory,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProviderChoice:
    provider: str
    model: str


def choose_provider(
    config: Config,
    *,
    provider: str | None = None,
    model: str | None = None,
    script: str | None = None,
    environ: Mapping[str, str] = os.environ,
) -> ProviderChoice:
    """The flags first (``--script`` implies the scripted provider), then a provider the config
    files name, then ``CODER_ES_SCRIPT``, then the configured default."""
    if script is not None:
        return ProviderChoice("scripted", str(resolve_script(script)))
    if provider is not None:
        return ProviderChoice(
            provider, model or (config.model if provider == config.provider else "")
        )
    if config.origin("provider") is None and environ.get(SCRIPT_ENV):
        return ProviderChoice("scripted", model or "")
    return ProviderChoice(config.provider, model or config.model)


def rules_of(config: Config) -> tuple[Rule, ...]:
    """The configured permission rules, as the permission layer takes them (``*`` = any)."""
    return tuple(
        configured_rule(
            r.tool,
            None if r.pattern in ("", "*") else r.pattern,
            r.action,
            "user" if r.trusted else UNTRUSTED_SOURCE,
        )
        for r in config.permissions.rules
    )


def _log_ignored(config: Config) -> None:
    for line in config.ignored_lines():
        log.warning("%s", line)


class ClientRuntime:
    def __init__(
        self,
        app: CoderApp,
        workspace: str | Path,
        config: Config,
        choice: ProviderChoice,
        *,
        agent: str | None = None,
        provider_factory: ProviderFactory | None = None,
        overrides: Overrides | None = None,
        environ: Mapping[str, str] = os.environ,
        clock: Clock | None = None,
    ) -> None:
        self.app = app
        self.clock = clock
        """The loops' clock (None: the system's): when a parked scheduled call is due."""
        self.workspace = Path(workspace).resolve()
        self.choice = choice
        self.agent = agent
        self.provider_factory = provider_factory
        self.overrides = overrides
        self.environ = environ
        self._services: dict[Path, AgentService] = {}
        self.config = config
        self.filter = ApprovalFilter.from_config(config.serve.rules)
        self.rules = rules_of(config)
        self.watcher: ConfigWatcher | None = None
        self.turn_ended: Callable[[str], None] | None = None
        """Called with a session id when a client's turn in it is over: live telemetry sends
        the turn's span then, not at the session's next message or when the server stops."""
        _log_ignored(config)

    def end_turn(self, session_id: str) -> None:
        if self.turn_ended is not None:
            self.turn_ended(session_id)

    # ------------------------------------------------------------------ sessions

    def options(self, title: str = "") -> SessionOptions:
        return SessionOptions(
            agent=self.agent,
            provider=self.choice.provider,
            model=self.choice.model,
            rules=self.rules,
            default_permission=self.config.permissions.default,
            title=title,
        )

    async def open_stored(
        self, service: AgentService, session_ref: str, **changes: Any
    ) -> tuple[SessionHandle, SessionOptions]:
        """Open a stored session as it now runs: its agent preset, provider and model are those
        its events hold (``SettingsChanged``), not this runtime's defaults, which are for new
        sessions. Two exceptions: a scripted session under a scripted runtime runs the
        runtime's script (a script's path is its "model"), and a session whose own provider
        cannot be built here (no key for it) runs this runtime's, which is then recorded as
        its change. ``changes``: other ``SessionOptions`` fields (an ACP client's MCP servers).
        Returns the handle and the options it was opened with.
        """
        current = self.app.get_session(session_ref)
        options = replace(self.options(), agent=None, **changes)
        if not current.provider == self.choice.provider == "scripted":
            options = replace(options, provider=None, model=None)
        try:
            return await service.open_session(session_ref, options), options
        except ProviderConfigError:
            if options.provider is not None:
                raise
        ours = replace(options, provider=self.choice.provider, model=self.choice.model)
        return await service.open_session(session_ref, ours), ours

    def service(self, cwd: str | Path | None = None) -> AgentService:
        where = Path(cwd).resolve() if cwd is not None else self.workspace
        if not where.is_dir():
            msg = f"the working directory {where} is not a directory"
            raise UsageError(msg)
        service = self._services.get(where)
        sandbox = self.config.sandbox
        if service is None:
            service = AgentService(
                self.app,
                where,
                provider_factory=self.provider_factory or configured_provider_factory(self.config),
                mcp_servers=self.config.mcp_servers.values(),
                sandbox=SandboxSettings.configured(
                    sandbox.mode, sandbox.network, sandbox.read_only, sandbox.writable
                ),
                # The configuration's hooks apply in its own workspace only.
                hooks=self.config.hooks if where == self.config.workspace.resolve() else (),
                clock=self.clock,
            )
            self._services[where] = service
        return service

    def check_provider(self) -> None:
        """Build the provider once, so a missing key or script fails at start, not mid-session."""
        factory = self.service().provider_factory
        provider = factory(self.choice.provider, self.choice.model)
        try:
            asyncio.run(provider.aclose())
        except RuntimeError:  # already inside a loop: nothing to release for a fresh provider
            pass

    # ------------------------------------------------------------------ configuration

    def apply_config(self, config: Config) -> list[str]:
        """Take a reloaded configuration; returns the sections that changed."""
        old = self.config
        changed = changed_sections(old, config)
        self.config = config
        self.filter = ApprovalFilter.from_config(config.serve.rules)
        self.rules = rules_of(config)
        if config.ignored != old.ignored:
            _log_ignored(config)
        moved = (config.serve.host, config.serve.port) != (old.serve.host, old.serve.port)
        if "store" in changed or moved:
            log.warning("store and listen-address changes take effect after a restart")
        return changed

    def update_sessions(self, handles: Iterable[SessionHandle]) -> None:
        """Give open sessions the reloaded rules. A running turn keeps its rules to its end."""
        for handle in handles:
            try:
                handle.update_permissions(self.rules, self.config.permissions.default)
            except CoderESError as e:  # one session's store conflict must not stop the others
                log.error("session %s keeps its permission rules: %s", handle.id, e)

    def watch(
        self,
        loop: asyncio.AbstractEventLoop,
        on_change: Callable[[Config, list[str]], None],
        on_error: Callable[[ConfigError], None],
        *,
        interval: float = 1.0,
    ) -> ConfigWatcher:
        """Poll the config files; callbacks run on ``loop`` (the watcher polls on a thread)."""

        def changed(config: Config) -> None:
            def apply() -> None:
                sections = self.apply_config(config)
                on_change(config, sections)

            loop.call_soon_threadsafe(apply)

        def failed(error: ConfigError) -> None:
            loop.call_soon_threadsafe(on_error, error)

        self.watcher = ConfigWatcher(
            self.workspace,
            environ=self.environ,
            overrides=self.overrides,
            on_change=changed,
            on_error=failed,
            interval=interval,
        ).start()
        return self.watcher

    def close(self) -> None:
        if self.watcher is not None:
            self.watcher.stop()
            self.watcher = None
