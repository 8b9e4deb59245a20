"""Reading the configuration: files, environment and command line merged into one ``Config``.

Precedence, lowest first: built-in defaults, the user config
(``$XDG_CONFIG_HOME/coder-es/config.toml``), the project config
(``WORKSPACE/.coder-es/config.toml``), environment variables, command-line flags. Each layer is
checked on its own (so a problem names the file and line it is in), then the layers merge key by
key, then the checks that need the merged result run (is the model known for the chosen
provider?). Every problem from every stage is reported together in one ``ConfigError``.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from coder_es.config.catalog import (
    CHECKED_PROVIDERS,
    DEFAULT_AGENT,
    DEFAULT_BASE_URLS,
    DEFAULT_KEY_ENVS,
    DEFAULT_MODELS,
    DEFAULT_PROVIDER,
    PROVIDERS,
    SCRIPT_ENV,
    is_known_model,
    known_models,
    provider_of_model,
)
from coder_es.config.layers import Key, Layer, Setting
from coder_es.config.locate import key_lines
from coder_es.config.problems import ConfigError, Origin, Problem, format_path
from coder_es.config.values import (
    Config,
    IgnoredSetting,
    McpServerConfig,
    PermissionsConfig,
    PriceConfig,
    ProviderConfig,
    RedactionConfig,
    RuleConfig,
    SandboxConfig,
    ServeConfig,
    StoreSettings,
    TelemetryConfig,
)
from coder_es.store.discover import STORE_DIRNAME
from coder_es.userdirs import user_config_dir

if TYPE_CHECKING:
    from coder_es.config.trust import TrustState

# Imported where needed, not here: the schema, reading TOML (tomllib), a project file's trust
# (hashlib, the trust store) and the hints of a problem (difflib) cost start-up time to every
# command, and most runs have no config file, no setting variable, no flag and no problem
# (tests/core/test_cli_startup.py).

CONFIG_NAME = "config.toml"

# Environment variables that set configuration keys. Empty values count as unset, so that
# `FOO= coder-es ...` switches a setting off rather than failing validation.
ENV_SETTINGS: tuple[tuple[str, Key], ...] = (
    ("CODER_ES_PROVIDER", ("provider",)),
    ("CODER_ES_MODEL", ("model",)),
    ("CODER_ES_AGENT", ("agent",)),
    ("ANTHROPIC_BASE_URL", ("providers", "anthropic", "base_url")),
    ("OPENAI_BASE_URL", ("providers", "openai", "base_url")),
    ("OPENAI_BASE_URL", ("providers", "openai-responses", "base_url")),
    ("OLLAMA_HOST", ("providers", "ollama", "base_url")),
    ("CODER_ES_STORE", ("store", "path")),
    ("CODER_ES_BACKEND", ("store", "backend")),
    ("CODER_ES_DURABLE", ("store", "durable")),
    ("CODER_ES_SERVE_TOKEN", ("serve", "token")),
    ("CODER_ES_SANDBOX", ("sandbox", "mode")),
)


@dataclass(frozen=True)
class Overrides:
    """Command-line flags that override the configuration (``None`` / empty: not given)."""

    provider: str | None = None
    model: str | None = None
    agent: str | None = None
    store: str | None = None
    backend: str | None = None
    allow: tuple[str, ...] = ()
    """``--allow TOOL[:PATTERN]`` rules."""
    deny: tuple[str, ...] = ()
    serve_host: str | None = None
    serve_port: int | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Overrides:
        """The overrides in parsed ``coder-es`` arguments (absent attributes are not given)."""

        def opt(name: str) -> Any:
            return getattr(args, name, None)

        return cls(
            provider=opt("provider"),
            model=opt("model"),
            agent=opt("agent"),
            store=opt("store"),
            backend=opt("backend"),
            allow=tuple(opt("allow") or ()),
            deny=tuple(opt("deny") or ()),
            serve_host=opt("host"),
            serve_port=opt("port"),
        )

    def items(self) -> list[tuple[str, Key, Any]]:
        pairs: list[tuple[str, Key, Any]] = [
            ("--provider", ("provider",), self.provider),
            ("--model", ("model",), self.model),
            ("--agent", ("agent",), self.agent),
            ("--store", ("store", "path"), self.store),
            ("--backend", ("store", "backend"), self.backend),
            ("--host", ("serve", "host"), self.serve_host),
            ("--port", ("serve", "port"), self.serve_port),
        ]
        return [(flag, path, value) for flag, path, value in pairs if value is not None]


def user_config_path(environ: Mapping[str, str] = os.environ) -> Path:
    """``$XDG_CONFIG_HOME/coder-es/config.toml``, by default ``~/.config/coder-es/config.toml``."""
    return user_config_dir(environ) / CONFIG_NAME


def project_config_path(workspace: str | Path) -> Path:
    return Path(workspace) / STORE_DIRNAME / CONFIG_NAME


def config_paths(workspace: str | Path, environ: Mapping[str, str] = os.environ) -> list[Path]:
    """The config files that apply to ``workspace``, lowest precedence first."""
    return [user_config_path(environ), project_config_path(workspace)]


_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)")


def read_file_layer(path: Path, *, project: bool) -> Layer | None:
    """The settings of one TOML file, checked; ``None`` when the file does not exist."""
    layer = Layer(str(path), "file", project=project)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        layer.fail(Problem(Origin(str(path)), "", f"cannot read: {e.strerror}"), ())
        return layer
    import tomllib

    from coder_es.config.schema import SCHEMA, walk
    from coder_es.config.trust import digest

    layer.sha256 = digest(data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        layer.fail(Problem(Origin(str(path)), "", f"not UTF-8 text: {e.reason}"), ())
        return layer
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        message = str(e)
        m = _TOML_POSITION.search(message)
        line = int(m.group(1)) if m else None
        detail = _TOML_POSITION.sub("", message)
        if m:
            detail += f" (column {m.group(2)})"
        origin = Origin(str(path), "file", line)
        layer.fail(Problem(origin, "", f"not valid TOML: {detail}"), ())
        return layer
    layer.lines = key_lines(text)
    walk(SCHEMA, raw, (), layer)
    if project:
        from coder_es.config.hook_scripts import hook_scripts, trust_digest

        # Trust covers the scripts the hooks run, not only their command lines.
        layer.scripts = hook_scripts(raw, Path(os.path.realpath(path.parent.parent)))
        layer.sha256 = trust_digest(layer.sha256, layer.scripts)
    return layer


def _ollama_host(text: str) -> tuple[str | None, str | None]:
    from coder_es.providers.errors import ProviderConfigError
    from coder_es.providers.ollama import host_url

    try:
        return host_url(text), None
    except ProviderConfigError as e:
        return None, str(e)


def env_layer(environ: Mapping[str, str]) -> Layer:
    layer = Layer("environment", "env")
    for name, path in ENV_SETTINGS:
        text = environ.get(name, "").strip()
        if not text:
            continue
        from coder_es.config.schema import Leaf, node_at

        origin = Origin(f"${name}", "env")
        node = node_at(path)
        assert isinstance(node, Leaf)
        if name == "OLLAMA_HOST":
            value, err = _ollama_host(text)
        else:
            value, err = node.kind.parse(text)
        if err:
            layer.fail(Problem(origin, format_path(path), err), path)
        else:
            layer.values[path] = Setting(value, origin, node.additive)
    return layer


def parse_rule(text: str) -> tuple[str, str]:
    """``TOOL`` or ``TOOL:PATTERN`` (as given to ``--allow`` / ``--deny``) as (tool, pattern).
    Raises ``ValueError`` with a message for an unknown tool or an empty pattern."""
    from coder_es.config.schema import TOOL

    tool, sep, pattern = text.partition(":")
    tool = tool.strip()
    _, err = TOOL.check(tool)
    if err:
        raise ValueError(err)
    if sep and not pattern.strip():
        raise ValueError(f"empty pattern in '{text}' (leave out ':' to match anything)")
    return tool, pattern if sep else "*"


def cli_layer(overrides: Overrides) -> Layer:
    layer = Layer("command line", "cli")
    for flag, path, value in overrides.items():
        from coder_es.config.schema import Leaf, node_at

        origin = Origin(flag, "cli")
        node = node_at(path)
        assert isinstance(node, Leaf)
        norm, err = node.kind.parse(value) if isinstance(value, str) else node.kind.check(value)
        if err:
            layer.fail(Problem(origin, format_path(path), err), path)
        else:
            layer.values[path] = Setting(norm, origin)
    flagged = (("--allow", "allow", overrides.allow), ("--deny", "deny", overrides.deny))
    for flag, action, rules in flagged:
        for text in rules:
            origin = Origin(flag, "cli")
            try:
                tool, pattern = parse_rule(text)
            except ValueError as e:
                layer.fail(Problem(origin, "", f"'{text}': {e}"), ("permissions", "rules"))
                continue
            layer.values[("permissions", "rules", tool, pattern)] = Setting(action, origin)
    return layer


def merge(layers: Iterable[Layer]) -> dict[Key, Setting]:
    """Later layers win key by key; additive lists are combined instead."""
    merged: dict[Key, Setting] = {}
    for layer in layers:
        for path, setting in layer.values.items():
            old = merged.get(path)
            if old is not None and setting.additive:
                combined = tuple(dict.fromkeys((*old.value, *setting.value)))
                setting = Setting(combined, setting.origin, True)
            merged[path] = setting
    return merged


def _get(merged: Mapping[Key, Setting], path: Key, default: Any) -> Any:
    setting = merged.get(path)
    return setting.value if setting is not None else default


def _under(merged: Mapping[Key, Setting], prefix: Key) -> list[tuple[Key, Setting]]:
    n = len(prefix)
    return [(k[n:], s) for k, s in merged.items() if k[:n] == prefix and len(k) > n]


def _resolve_store_path(setting: Setting | None, workspace: Path) -> Path:
    if setting is None:
        return workspace / STORE_DIRNAME
    path = Path(setting.value).expanduser()
    # A path in a config file is relative to the workspace (so a shared project config means
    # the same place on every machine); one from a flag or variable is relative to where the
    # user typed it.
    if setting.origin.kind == "file":
        return (workspace / path).resolve()
    return path.resolve()


def _provider(
    name: str, merged: Mapping[Key, Setting], environ: Mapping[str, str]
) -> ProviderConfig:
    prefix: Key = ("providers", name)
    base_url = _get(merged, (*prefix, "base_url"), DEFAULT_BASE_URLS[name])
    explicit_env = (*prefix, "api_key_env") in merged
    key_env = _get(merged, (*prefix, "api_key_env"), DEFAULT_KEY_ENVS[name])
    api_key = (environ.get(key_env, "").strip() or None) if key_env else None
    custom = base_url != DEFAULT_BASE_URLS[name]
    # Anthropic and api.openai.com refuse requests without a key; an OpenAI-compatible local
    # server usually needs none, unless the user named a key variable for it.
    needs_key = bool(key_env) and (explicit_env or name == "anthropic" or not custom)
    rows: dict[str, dict[str, float]] = {}
    for rest, setting in _under(merged, (*prefix, "prices")):
        rows.setdefault(rest[0], {})[rest[1]] = setting.value
    prices = {
        model: PriceConfig(
            input=row["input"],
            output=row["output"],
            cache_read=row.get("cache_read"),
            cache_write=row.get("cache_write"),
        )
        for model, row in rows.items()
        if "input" in row and "output" in row
    }
    return ProviderConfig(
        name=name,
        base_url=base_url,
        api_key_env=key_env,
        api_key=api_key,
        needs_key=needs_key,
        models=tuple(_get(merged, (*prefix, "models"), ())),
        prices=MappingProxyType(prices),
    )


def _models(merged: Mapping[Key, Setting]) -> Mapping[str, Mapping[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for rest, setting in _under(merged, ("models",)):
        rows.setdefault(rest[0], {})[rest[1]] = setting.value
    return MappingProxyType(rows)


def _rules(merged: Mapping[Key, Setting], prefix: Key) -> tuple[RuleConfig, ...]:
    return tuple(
        RuleConfig(
            tool=rest[0],
            pattern=rest[1],
            action=s.value,
            source=s.origin.source,
            trusted=not s.untrusted,
        )
        for rest, s in _under(merged, prefix)
    )


def _mcp_servers(merged: Mapping[Key, Setting]) -> dict[str, McpServerConfig]:
    rows: dict[str, dict[Key, Any]] = {}
    for rest, setting in _under(merged, ("mcp_servers",)):
        rows.setdefault(rest[0], {})[rest[1:]] = setting.value
    servers = {}
    for name, row in rows.items():
        enabled_tools = row.get(("enabled_tools",))
        servers[name] = McpServerConfig(
            name=name,
            command=row.get(("command",), ""),
            args=tuple(row.get(("args",), ())),
            env=MappingProxyType({k[1]: v for k, v in row.items() if k[0] == "env"}),
            cwd=row.get(("cwd",)),
            url=row.get(("url",), ""),
            headers=MappingProxyType({k[1]: v for k, v in row.items() if k[0] == "headers"}),
            enabled=row.get(("enabled",), True),
            startup_timeout_s=row.get(("startup_timeout_s",), McpServerConfig.startup_timeout_s),
            tool_timeout_s=row.get(("tool_timeout_s",), McpServerConfig.tool_timeout_s),
            enabled_tools=None if enabled_tools is None else tuple(enabled_tools),
            disabled_tools=tuple(row.get(("disabled_tools",), ())),
        )
    return servers


def _hooks(merged: Mapping[Key, Setting]) -> tuple[Any, ...]:
    """The configured hooks, each event's numbered in configuration order."""
    from dataclasses import replace

    out: list[Any] = []
    for _event, setting in _under(merged, ("hooks",)):
        out += [replace(spec, index=i) for i, spec in enumerate(setting.value)]
    return tuple(out)


def build(
    merged: Mapping[Key, Setting],
    workspace: Path,
    environ: Mapping[str, str],
    files: Sequence[Path] = (),
    trust: TrustState | None = None,
    ignored: Sequence[IgnoredSetting] = (),
) -> Config:
    """The ``Config`` for merged, already checked settings."""
    provider = _get(merged, ("provider",), DEFAULT_PROVIDER)
    postgres = {
        f"POSTGRES_{rest[0].upper()}": str(s.value)
        for rest, s in _under(merged, ("store", "postgres"))
    }
    agents: dict[str, dict[str, Any]] = {}
    for rest, s in _under(merged, ("agents",)):
        agents.setdefault(rest[0], {})[rest[1]] = s.value
    harnesses: dict[str, dict[str, Any]] = {}
    for rest, s in _under(merged, ("harnesses",)):
        entry = harnesses.setdefault(rest[0], {})
        if rest[1] == "env":
            entry.setdefault("env", {})[rest[2]] = s.value
        else:
            entry[rest[1]] = s.value
    return Config(
        workspace=workspace,
        provider=provider,
        agents=MappingProxyType(agents),
        harnesses=MappingProxyType(harnesses),
        model=_get(merged, ("model",), DEFAULT_MODELS[provider]),
        agent=_get(merged, ("agent",), DEFAULT_AGENT),
        providers=MappingProxyType({p: _provider(p, merged, environ) for p in PROVIDERS}),
        permissions=PermissionsConfig(
            default=_get(merged, ("permissions", "default"), "ask"),
            rules=_rules(merged, ("permissions", "rules")),
        ),
        redaction=RedactionConfig(
            env_vars=_get(merged, ("redaction", "env"), ()),
            patterns=_get(merged, ("redaction", "patterns"), ()),
            forget_after_days=_get(merged, ("redaction", "forget_after_days"), None),
        ),
        serve=ServeConfig(
            host=_get(merged, ("serve", "host"), ServeConfig.host),
            port=_get(merged, ("serve", "port"), ServeConfig.port),
            token=_get(merged, ("serve", "token"), None),
            rules=_rules(merged, ("serve", "rules")),
            allowed_origins=_get(merged, ("serve", "allowed_origins"), ()),
            max_connections=_get(merged, ("serve", "max_connections"), ServeConfig.max_connections),
            max_frame_bytes=_get(merged, ("serve", "max_frame_bytes"), ServeConfig.max_frame_bytes),
            max_messages_per_second=_get(
                merged, ("serve", "max_messages_per_second"), ServeConfig.max_messages_per_second
            ),
            max_sessions_per_connection=_get(
                merged,
                ("serve", "max_sessions_per_connection"),
                ServeConfig.max_sessions_per_connection,
            ),
        ),
        sandbox=SandboxConfig(
            mode=_get(merged, ("sandbox", "mode"), SandboxConfig.mode),
            network=_get(merged, ("sandbox", "network"), SandboxConfig.network),
            read_only=_get(merged, ("sandbox", "read_only"), SandboxConfig.read_only),
            writable=tuple(_get(merged, ("sandbox", "writable"), ())),
        ),
        store=StoreSettings(
            backend=_get(merged, ("store", "backend"), StoreSettings.backend),
            path=_resolve_store_path(merged.get(("store", "path")), workspace),
            durable=_get(merged, ("store", "durable"), True),
            postgres=MappingProxyType(postgres),
        ),
        mcp_servers=MappingProxyType(_mcp_servers(merged)),
        telemetry=TelemetryConfig(
            endpoint=_get(merged, ("telemetry", "endpoint"), None),
            protocol=_get(merged, ("telemetry", "protocol"), None),
            service_name=_get(merged, ("telemetry", "service_name"), None),
            capture_content=_get(merged, ("telemetry", "capture_content"), None),
            latest_conventions=_get(merged, ("telemetry", "latest_conventions"), None),
            enabled=_get(merged, ("telemetry", "enabled"), True),
        ),
        files=tuple(files),
        origins=MappingProxyType({format_path(k): s.origin for k, s in merged.items()}),
        trust=trust,
        ignored=tuple(ignored),
        models=_models(merged),
        hooks=_hooks(merged),
    )


def _origin_of(config: Config, path: str) -> Origin:
    return config.origin(path) or Origin("defaults", "default")


def _elsewhere(model: str, provider: str) -> str:
    """A hint naming a close model of another provider (``gpt5`` asked of anthropic)."""
    from coder_es.config.suggest import close_matches

    for other in CHECKED_PROVIDERS:
        # openai and openai-responses serve the same models: no hint between them.
        if known_models(other) != known_models(provider):
            hits = close_matches(model, known_models(other), n=1)
            if hits:
                return f"; did you mean the {other} model '{hits[0]}' (provider = \"{other}\")?"
    return ""


def cross_check(config: Config, failed: set[Key]) -> list[Problem]:
    """Checks that need the merged result. ``failed`` holds the key paths that already have a
    problem: a check that depends on one of them would only repeat it in a confusing form."""

    def touches(*prefixes: Key) -> bool:
        return any(f == p[: len(f)] or p == f[: len(p)] for f in failed for p in prefixes)

    problems: list[Problem] = []
    name, model = config.provider, config.model
    provider = config.provider_config()
    if (
        model
        and name in CHECKED_PROVIDERS
        and not provider.custom_base_url
        and not touches(
            ("provider",),
            ("model",),
            ("providers", name, "base_url"),
            ("providers", name, "models"),
            ("providers", name, "prices", model),
        )
    ):
        known = provider.known_models()
        if not is_known_model(model, known):
            other = provider_of_model(model)
            if other is not None and other != name:
                hint = f'; it is an {other} model: set provider = "{other}" or choose another'
            else:
                from coder_es.config.suggest import did_you_mean

                hint = did_you_mean(model, known) or _elsewhere(model, name)
                hint += f" (if it is a new model, add it to providers.{name}.models)"
            problems.append(
                Problem(
                    _origin_of(config, "model"),
                    "model",
                    f"model '{model}' unknown for provider '{name}'{hint}",
                )
            )
    for name, server in config.mcp_servers.items():
        if touches(("mcp_servers", name)):
            continue
        if bool(server.command) == bool(server.url):
            origin = next(
                (o for k, o in config.origins.items() if k.startswith(f"mcp_servers.{name}.")),
                Origin("defaults", "default"),
            )
            what = "both 'command' and 'url'" if server.command else "neither 'command' nor 'url'"
            problems.append(
                Problem(
                    origin,
                    f"mcp_servers.{name}",
                    f"has {what}: set 'command' (a stdio server) or 'url' (Streamable HTTP)",
                )
            )
    serve = config.serve
    if not serve.loopback and not serve.token and not touches(("serve",)):
        problems.append(
            Problem(
                _origin_of(config, "serve.host"),
                "serve.host",
                f"'{serve.host}' accepts connections from other machines, so the server needs a "
                "token: set serve.token in the user config or $CODER_ES_SERVE_TOKEN",
            )
        )
    return problems


def provider_problems(config: Config, environ: Mapping[str, str] = os.environ) -> list[Problem]:
    """What stops the chosen provider from working: a missing model, missing credentials."""
    name = config.provider
    provider = config.provider_config()
    problems: list[Problem] = []
    where = _origin_of(config, "provider")
    if name == "scripted":
        script = config.model if config.model.endswith((".json", ".jsonl")) else ""
        if not script and not environ.get(SCRIPT_ENV, "").strip():
            problems.append(
                Problem(
                    where,
                    "model",
                    f"the scripted provider needs a script: set model to its path "
                    f"(a .json or .jsonl file) or set ${SCRIPT_ENV}",
                )
            )
        return problems
    if not config.model:
        problems.append(
            Problem(
                where,
                "model",
                f"no model chosen for provider '{name}': set model in a config file, "
                "$CODER_ES_MODEL or --model",
            )
        )
    if provider.needs_key and not provider.api_key:
        env = provider.api_key_env
        problems.append(
            Problem(
                Origin(f"${env}", "env"),
                f"providers.{name}",
                f"missing credentials for provider '{name}': set the environment variable "
                f"{env} (export {env}=...)",
            )
        )
    return problems


def load_config(
    workspace: str | Path,
    environ: Mapping[str, str] = os.environ,
    overrides: Overrides | None = None,
    *,
    require_provider: bool = False,
) -> Config:
    """The configuration for ``workspace``. Raises ``ConfigError`` listing every problem.

    With ``require_provider``, a missing model or missing credentials for the chosen provider
    are problems too (commands that talk to a model want that; ``sessions`` does not).
    """
    root = Path(workspace).resolve()
    layers: list[Layer] = []
    files: list[Path] = []
    trust: TrustState | None = None
    ignored: list[IgnoredSetting] = []
    for path, project in ((user_config_path(environ), False), (project_config_path(root), True)):
        layer = read_file_layer(path, project=project)
        if layer is None:
            continue
        if project and not layer.problems:
            from coder_es.config.trust import TrustStore
            from coder_es.config.untrusted import hold_back

            # Until the user trusts this file, it may only make things stricter.
            trust = TrustStore(environ).state(path, layer.sha256, layer.scripts)
            if not trust.trusted:
                ignored = hold_back(layer, merge(layers))
        layers.append(layer)
        files.append(path)
    layers.append(env_layer(environ))
    layers.append(cli_layer(overrides or Overrides()))
    problems = [p for layer in layers for p in layer.problems]
    config = build(merge(layers), root, environ, files, trust, ignored)
    problems += cross_check(config, {key for layer in layers for key in layer.failed})
    if require_provider:
        problems += provider_problems(config, environ)
    if problems:
        raise ConfigError(problems)
    return config


def settings_needing_trust(
    workspace: str | Path, environ: Mapping[str, str] = os.environ
) -> list[IgnoredSetting]:
    """The settings of the workspace's project config that apply only while it is trusted
    (whether it is trusted now or not): what ``coder-es trust`` grants."""
    root = Path(workspace).resolve()
    user = read_file_layer(user_config_path(environ), project=False)
    project = read_file_layer(project_config_path(root), project=True)
    if project is None:
        return []
    from coder_es.config.untrusted import hold_back

    return hold_back(project, merge([user] if user is not None else []))


def require_credentials(config: Config, environ: Mapping[str, str] = os.environ) -> ProviderConfig:
    """The chosen provider's settings, or ``ConfigError`` saying what is missing."""
    problems = provider_problems(config, environ)
    if problems:
        raise ConfigError(problems, f"provider '{config.provider}' is not ready")
    return config.provider_config()
