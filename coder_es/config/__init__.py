"""Validated configuration: user and project TOML files, environment and flags, in one ``Config``.

    config = load_config(workspace)                     # ConfigError lists every problem
    provider = require_credentials(config)              # or says which variable to set
    watcher = ConfigWatcher(workspace, on_change=apply).start()   # serve / acp hot reload

The reference for every key is docs/configuration.md.
"""

from typing import TYPE_CHECKING, Any

from coder_es.config.load import (
    ENV_SETTINGS,
    Overrides,
    config_paths,
    load_config,
    parse_rule,
    project_config_path,
    provider_problems,
    require_credentials,
    user_config_path,
)
from coder_es.config.problems import ConfigError, Origin, Problem
from coder_es.config.values import (
    Config,
    PermissionsConfig,
    PriceConfig,
    ProviderConfig,
    RedactionConfig,
    RuleConfig,
    ServeConfig,
    StoreSettings,
)

if TYPE_CHECKING:
    from coder_es.config.reload import ConfigWatcher, changed_sections


def __getattr__(name: str) -> Any:
    # The watcher (threads, logging) is only for serve / acp: every other command reads the
    # configuration once and should not pay for importing it.
    if name in ("ConfigWatcher", "changed_sections"):
        from coder_es.config import reload

        return getattr(reload, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ENV_SETTINGS",
    "Config",
    "ConfigError",
    "ConfigWatcher",
    "Origin",
    "Overrides",
    "PermissionsConfig",
    "PriceConfig",
    "Problem",
    "ProviderConfig",
    "RedactionConfig",
    "RuleConfig",
    "ServeConfig",
    "StoreSettings",
    "changed_sections",
    "config_paths",
    "load_config",
    "parse_rule",
    "project_config_path",
    "provider_problems",
    "require_credentials",
    "user_config_path",
]
