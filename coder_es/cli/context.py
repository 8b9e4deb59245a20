"""What every command needs: the workspace, the store configuration, the opened application.

The workspace is ``--workspace`` when given, else the nearest directory at or above the current
one that holds a ``.coder-es/`` (``coder_es.store.discover``), else the current directory. A
command that works on recorded sessions never creates a store: where there is none, ``ctx.app``
raises ``NoStoreError`` naming where it looked.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coder_es.cli.search_feed import SearchIndexFeed
from coder_es.config import Config, ConfigError, Overrides, load_config
from coder_es.errors import UsageError
from coder_es.store.config import StoreConfig
from coder_es.store.discover import Discovery, check_owner, discover_workspace
from coder_es.telemetry.attach import start_telemetry

if TYPE_CHECKING:
    from coder_es.application import CoderApp
    from coder_es.redaction import Redactor
    from coder_es.summaries import SessionSummary, StoreReader
    from coder_es.telemetry.live import LiveTelemetry


class NoStoreError(UsageError):
    """A command that works on recorded sessions ran where there is no store."""

    def __init__(self, config: StoreConfig, discovery: Discovery | None) -> None:
        self.config = config
        where = str(config.path) if config.backend in ("lmdb", "sqlite") else config.describe()
        if discovery is not None and not discovery.found and len(discovery.searched) > 1:
            where += f" (no .coder-es/ in {discovery.describe_search()})"
        other = _other_backend(config)
        if other is not None:
            # The folder holds a store, of another backend than the one asked for.
            super().__init__(
                f"no {config.backend} store at {where}: the store there is {other} "
                f"(leave out --backend, or pass --backend {other})"
            )
            return
        super().__init__(
            f"no coder-es store at {where}; sessions are recorded by `coder-es run`, `chat` or "
            "`demo`, or choose a store with --workspace DIR or --store DIR"
        )


def _other_backend(config: StoreConfig) -> str | None:
    if config.backend not in ("lmdb", "sqlite"):
        return None
    for backend in ("lmdb", "sqlite"):
        if backend != config.backend and replace(config, backend=backend).exists():
            return backend
    return None


@dataclass
class Context:
    workspace: Path
    settings: Config
    """The validated configuration: defaults < user file < project file < environment < flags."""
    config: StoreConfig
    """Where the events and blobs live (from ``settings.store``)."""
    needs_store: bool = False
    """The command works on recorded sessions and must not create a store (``ctx.app`` raises
    ``NoStoreError`` instead)."""
    discovery: Discovery | None = None
    """How the workspace was found (``None``: ``--workspace`` named it)."""
    config_error: ConfigError | None = None
    """Only with ``tolerate_config_errors``: the problems of the configuration; ``settings``
    then holds the defaults and the command line's choices."""
    _app: CoderApp | None = field(default=None, repr=False)
    _telemetry: LiveTelemetry | None = field(default=None, repr=False)
    _search_feed: SearchIndexFeed | None = field(default=None, repr=False)
    _reader: StoreReader | None = field(default=None, repr=False)

    @classmethod
    def from_args(
        cls,
        args: argparse.Namespace,
        *,
        needs_store: bool = False,
        tolerate_config_errors: bool = False,
    ) -> Context:
        given = getattr(args, "workspace", None)
        discovery: Discovery | None = None
        if given is not None:
            if not given:
                raise UsageError("--workspace needs a directory")
            workspace = Path(given).resolve()
            if not workspace.is_dir():
                msg = f"the workspace {workspace} is not a directory"
                raise UsageError(msg)
        else:
            discovery = discover_workspace(Path(os.getcwd()))
            workspace = discovery.root
        # Before anything in it is read (its config, its store, its transaction journals).
        check_owner(workspace)
        overrides = Overrides.from_args(args)
        config_error: ConfigError | None = None
        try:
            settings = load_config(workspace, overrides=overrides)
        except ConfigError as e:
            if not tolerate_config_errors:
                raise
            config_error = e
            settings = _defaults(workspace, overrides)
        return cls(
            workspace=workspace,
            settings=settings,
            config=settings.store.to_store_config(),
            needs_store=needs_store,
            discovery=discovery,
            config_error=config_error,
        )

    @property
    def app(self) -> CoderApp:
        if self._app is None:
            if self.needs_store and not self.config.exists():
                raise NoStoreError(self.config, self.discovery)
            if self._reader is not None:  # one opening of the store at a time (LMDB's rule)
                self._reader.close()
                self._reader = None
            from coder_es.application import CoderApp
            from coder_es.redaction import Redactor

            redaction = self.settings.redaction
            redactor = Redactor.with_settings(redaction.env_vars, redaction.patterns)
            self._app = CoderApp(self.config, redactor=with_mcp_secrets(redactor, self.settings))
            self._telemetry = start_telemetry(self._app, self.settings.telemetry)
            # What this process records is searchable without indexing it first (issue 22.1).
            self._search_feed = SearchIndexFeed.attach(self._app)
        return self._app

    def session_summaries(self, *, archived: bool | None = False) -> list[SessionSummary]:
        """``app.list_sessions(archived=...)``; for a file store not yet opened by this process,
        read from the event log alone, without building the application (issue 35)."""
        if self._app is not None or self.config.backend not in ("lmdb", "sqlite"):
            return self.app.list_sessions(archived=archived)
        if not self.config.exists():
            raise NoStoreError(self.config, self.discovery)
        from coder_es.summaries import read_summaries

        try:
            found = read_summaries(self.config)
        except Exception:
            # A store that does not open or decode cleanly: opening the application names the
            # problem the way every other command does (same message, same exit code).
            return self.app.list_sessions(archived=archived)
        return [s for s in found if archived is None or s.archived == archived]

    def reader(self) -> StoreReader | None:
        """The store opened for reading without the application (``summaries.StoreReader``):
        for a file store not yet opened by this process, else None, as when it does not open
        cleanly (the caller then reads through ``app``, which names the problem the way every
        other command does). A read command uses it when what it reads is up to date."""
        if self._reader is not None:
            return self._reader
        if self._app is not None or self.config.backend not in ("lmdb", "sqlite"):
            return None
        if not self.config.exists():
            raise NoStoreError(self.config, self.discovery)
        from coder_es.summaries import StoreReader

        try:
            self._reader = StoreReader(self.config)
        except Exception:
            return None
        return self._reader

    def prepare_search_index(self) -> None:
        """Open the search index this process's first save feeds now (``SearchIndexFeed``): for
        a command with time to spare before that save."""
        if self._search_feed is not None:
            self._search_feed.prepare()

    def end_turn(self, session_id: str) -> None:
        """A turn of an interactive command (``chat``, ``acp``, ``serve``) is over: live
        telemetry sends its span now rather than at the session's next message or at exit."""
        if self._telemetry is not None:
            self._telemetry.finish_session(session_id)

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self._search_feed is not None:
            self._search_feed.close()
            self._search_feed = None
        if self._telemetry is not None:
            self._telemetry.close()
            self._telemetry = None
        if self._app is not None:
            self._app.close()
            self._app = None


def configured_agent(ctx: Context, current: str | None = None) -> str | None:
    """The agent preset the configuration states (``--agent``, ``$CODER_ES_AGENT``, a config
    file; an untrusted project's only when stricter), None when nothing states one: a new
    session is then ``build`` and a resumed one keeps its own. ``current``: the preset of the
    session being resumed, which an untrusted project may only make stricter too."""
    origin = ctx.settings.origin("agent")
    if origin is None:
        return None
    agent = ctx.settings.agent
    trust = ctx.settings.trust
    from_untrusted = (
        trust is not None and not trust.trusted and origin.source == str(trust.config_file)
    )
    if current is not None and from_untrusted:
        from coder_es.config.catalog import AGENTS  # build < plan < explore

        stricter = current in AGENTS and AGENTS.index(agent) > AGENTS.index(current)
        return agent if stricter else None
    return agent


def _defaults(workspace: Path, overrides: Overrides) -> Config:
    """The configuration from the defaults, the environment and the command line: what
    ``doctor`` and the read-only commands fall back to when the files have problems (the
    variables or the flags, when they have problems themselves, are left out)."""
    from coder_es.config.load import build, cli_layer, env_layer, merge

    layers = [
        layer for layer in (env_layer(os.environ), cli_layer(overrides)) if not layer.problems
    ]
    return build(merge(layers), workspace, {})


def with_mcp_secrets(redactor: Redactor, settings: Config) -> Redactor:
    """``redactor`` plus the values of the MCP servers' ``env`` and ``headers``: the servers get
    them, the store and exports never do."""
    import re

    from coder_es.redaction import Redactor

    # Values the user put in env/headers are secrets by placement; short ones ("1", "true")
    # would only redact ordinary words.
    extra = [
        ("mcp", name, re.escape(value))
        for server in settings.mcp_servers.values()
        for name, value in server.secrets()
        if len(value) >= 8
    ]
    return Redactor.from_rules([*extra, *redactor.rules]) if extra else redactor


def print_json(value: Any) -> None:
    """One JSON document on one line (stable key order, so scripts can diff outputs)."""
    from coder_es.domain.chain import canonical_json

    sys.stdout.write(canonical_json(value) + "\n")
