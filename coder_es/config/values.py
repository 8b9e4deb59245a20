"""The validated configuration: frozen values built by ``load_config``."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from coder_es.config.catalog import DEFAULT_BASE_URLS, known_models
from coder_es.config.problems import Origin
from coder_es.store.config import StoreConfig

if TYPE_CHECKING:
    from coder_es.config.trust import TrustState
    from coder_es.providers.catalogue import ModelCatalogue
    from coder_es.providers.pricing import PriceTable


def _empty() -> Mapping[str, Any]:
    return MappingProxyType({})


@dataclass(frozen=True)
class RuleConfig:
    """One permission rule: ``action`` for calls of ``tool`` whose subject (the command for
    ``bash``, the path for file tools) matches the glob ``pattern``. ``tool`` may be ``*``."""

    tool: str
    pattern: str
    action: str
    source: str = ""
    """Where the rule was written: a config file, ``--allow`` or ``--deny``. Lets the permission
    layer tell a rule the user wrote from one a cloned project brought along."""
    trusted: bool = True
    """False for a rule of an untrusted project config (a deny or ask): it may only make a
    decision stricter."""


@dataclass(frozen=True)
class IgnoredSetting:
    """A setting of an untrusted project config that does not apply, and why."""

    path: str
    value: Any
    origin: Origin
    reason: str

    def __str__(self) -> str:
        return f"{self.origin}: {self.path} = {self.value!r} not applied: {self.reason}"


@dataclass(frozen=True)
class PriceConfig:
    """US dollars per million tokens; cache prices default to the input price."""

    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None


@dataclass(frozen=True)
class ProviderConfig:
    name: str
    base_url: str
    api_key_env: str
    """The environment variable holding the API key ("" when the provider needs none)."""
    api_key: str | None = field(default=None, repr=False)
    """The key read from ``api_key_env`` at load time; never printed."""
    needs_key: bool = False
    """Whether requests fail without a key (api.openai.com does; a local compatible server
    usually does not)."""
    models: tuple[str, ...] = ()
    """Extra model names to accept (new releases, fine-tunes)."""
    prices: Mapping[str, PriceConfig] = field(default_factory=_empty)

    @property
    def custom_base_url(self) -> bool:
        return self.base_url != DEFAULT_BASE_URLS.get(self.name, "")

    def known_models(self) -> tuple[str, ...]:
        return known_models(self.name, (*self.models, *self.prices))


@dataclass(frozen=True)
class PermissionsConfig:
    default: str = "ask"
    """The action for a tool call no rule matches."""
    rules: tuple[RuleConfig, ...] = ()
    """In precedence order, lowest first: user config, project config, command line."""


@dataclass(frozen=True)
class RedactionConfig:
    env_vars: tuple[str, ...] = ()
    """Names of environment variables whose values are redacted wherever they appear (added to
    the built-in list of credential variables)."""
    patterns: tuple[str, ...] = ()
    """Regular expressions whose matches are redacted."""
    forget_after_days: int | None = None
    """``coder-es forget --expired`` destroys the sealed secrets of sessions started longer ago."""

    def compiled(self) -> tuple[re.Pattern[str], ...]:
        return tuple(re.compile(p) for p in self.patterns)


@dataclass(frozen=True)
class TelemetryConfig:
    """The ``[telemetry]`` table (user config only: a project cannot redirect sessions). The
    standard ``OTEL_*`` variables win over it (``coder_es.telemetry.settings``)."""

    endpoint: str | None = None
    protocol: str | None = None
    service_name: str | None = None
    capture_content: bool | None = None
    latest_conventions: bool | None = None
    enabled: bool = True


@dataclass(frozen=True)
class ServeConfig:
    host: str = "127.0.0.1"
    port: int = 8765
    token: str | None = field(default=None, repr=False)
    rules: tuple[RuleConfig, ...] = ()
    """Tool calls the server answers itself: ``allow`` (auto-approve) or ``deny``; ``ask`` (the
    default) forwards the question to the connected client."""
    allowed_origins: tuple[str, ...] = ()
    """Browser origins (``https://app.example``) that may connect; a request with no Origin (a
    program, not a web page) needs only the token."""
    max_connections: int = 64
    max_frame_bytes: int = 1 << 20
    max_messages_per_second: int = 20
    """Per connection, with a burst of as many messages."""
    max_sessions_per_connection: int = 16
    """Sessions one connection may create (the one it opens, and forks into new sessions)."""

    @property
    def loopback(self) -> bool:
        return self.host in ("127.0.0.1", "::1", "localhost") or self.host.startswith("127.")


@dataclass(frozen=True)
class SandboxConfig:
    """``[sandbox]``: how shell commands run (``coder_es.sandbox``)."""

    mode: str = "auto"
    network: bool | None = None
    """None: on for agents that may write, off for read-only ones."""
    read_only: bool = False
    writable: tuple[str, ...] = ()
    """Places outside the workspace commands may change, as written (``~`` not expanded)."""


@dataclass(frozen=True)
class McpServerConfig:
    """One MCP server: a program spoken to over stdio (``command``) or an HTTP endpoint
    (``url``). ``env`` and ``headers`` may hold secrets: they are used, never recorded."""

    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=_empty, repr=False)
    cwd: str | None = None
    url: str = ""
    headers: Mapping[str, str] = field(default_factory=_empty, repr=False)
    transport: str = ""
    """``stdio``, ``http`` (Streamable HTTP) or ``sse`` (only from ACP clients); "" derives it
    from ``command`` / ``url``."""
    enabled: bool = True
    startup_timeout_s: float = 30.0
    tool_timeout_s: float = 60.0
    enabled_tools: tuple[str, ...] | None = None
    disabled_tools: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        return self.transport or ("stdio" if self.command else "http")

    def offers(self, tool: str) -> bool:
        """Whether the server's tool passes the ``enabled_tools`` / ``disabled_tools`` filters."""
        if self.enabled_tools is not None and tool not in self.enabled_tools:
            return False
        return tool not in self.disabled_tools

    def secrets(self) -> list[tuple[str, str]]:
        """(name, value) of every ``env`` and ``headers`` value, for the redactor: used by the
        server, never stored (a server may echo them in its output or its stderr)."""
        return [(f"mcp.{self.name}.env.{k}", v) for k, v in self.env.items()] + [
            (f"mcp.{self.name}.headers.{k}", v) for k, v in self.headers.items()
        ]

    def describe(self) -> dict[str, Any]:
        """What may be recorded and shown: no value of ``env`` or ``headers``, only their names."""
        out: dict[str, Any] = {"name": self.name, "transport": self.kind}
        if self.kind == "stdio":
            out |= {"command": self.command, "args": list(self.args), "cwd": self.cwd}
            out["env"] = sorted(self.env)
        else:
            out |= {"url": self.url, "headers": sorted(self.headers)}
        return out


@dataclass(frozen=True)
class StoreSettings:
    backend: str = "lmdb"
    path: Path = Path(".coder-es")
    durable: bool = True
    postgres: Mapping[str, str] = field(default_factory=_empty)
    """``POSTGRES_*`` settings from the config file (the environment still wins)."""

    def to_store_config(self, environ: Mapping[str, str] | None = None) -> StoreConfig:
        env = os.environ if environ is None else environ
        extra = dict(self.postgres)
        extra.update(
            {k: v for k, v in env.items() if k.startswith("POSTGRES_") or k.startswith("LMDB_")}
        )
        return StoreConfig(backend=self.backend, path=self.path, durable=self.durable, extra=extra)


@dataclass(frozen=True)
class Config:
    workspace: Path
    provider: str
    model: str
    """The model for ``provider``; "" when none is configured (Ollama, scripted)."""
    agent: str
    providers: Mapping[str, ProviderConfig]
    """Every provider, configured or not."""
    permissions: PermissionsConfig = PermissionsConfig()
    redaction: RedactionConfig = RedactionConfig()
    serve: ServeConfig = ServeConfig()
    sandbox: SandboxConfig = SandboxConfig()
    store: StoreSettings = StoreSettings()
    mcp_servers: Mapping[str, McpServerConfig] = field(default_factory=_empty)
    """By name, in the order first configured; disabled ones included (``enabled``)."""
    telemetry: TelemetryConfig = TelemetryConfig()
    agents: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """``[agents.NAME]`` subagent definitions (``coder_es.permissions.subagents``)."""
    harnesses: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """``[harnesses.NAME]``: kind, command, env (``coder_es.harness.spec``)."""
    files: tuple[Path, ...] = ()
    """The config files that were read, lowest precedence first."""
    origins: Mapping[str, Origin] = field(default_factory=dict, compare=False, repr=False)
    """Where each explicitly set key (dotted path) came from; defaults are absent."""
    trust: TrustState | None = None
    """The trust of the project config (None: the workspace has none)."""
    ignored: tuple[IgnoredSetting, ...] = ()
    """Settings of an untrusted project config that do not apply (``config.untrusted``)."""
    models: Mapping[str, Mapping[str, Any]] = field(default_factory=_empty)
    """``[models.NAME]`` rows laid over the bundled model catalogue."""
    hooks: tuple[Any, ...] = ()
    """``[[hooks.EVENT]]``: ``coder_es.hooks.HookSpec`` values in configuration order (the
    user's, then a trusted project's)."""

    def ignored_lines(self) -> list[str]:
        """One line per setting not applied, then why (for ``run``, ``doctor``, ``serve``)."""
        if not self.ignored or self.trust is None:
            return []
        return [str(i) for i in self.ignored] + [f"(not applied because {self.trust.explain()})"]

    def origin(self, path: str) -> Origin | None:
        return self.origins.get(path)

    def provider_config(self, name: str | None = None) -> ProviderConfig:
        return self.providers[name or self.provider]

    def price_table(self) -> PriceTable:
        """The providers' default prices with the user's overrides on top."""
        from coder_es.providers.price import Price
        from coder_es.providers.pricing import PriceTable

        overrides = {
            model: Price.of(p.input, p.output, p.cache_read, p.cache_write)
            for provider in self.providers.values()
            for model, p in provider.prices.items()
        }
        models = self.model_catalogue()
        rows = {name: models.info(name).price for name in self.models}
        own = {name: price for name, price in rows.items() if price is not None}
        return PriceTable.default().merged({**own, **overrides})

    def model_catalogue(self) -> ModelCatalogue:
        """The bundled model catalogue with the ``[models]`` rows on top."""
        from coder_es.providers.catalogue import ModelCatalogue

        return ModelCatalogue.bundled().merged(self.models)
