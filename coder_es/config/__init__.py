"""Validated configuration: user and project TOML files, environment and flags, in one ``Config``.

    config = load_config(workspace)                     # ConfigError lists every problem
    provider = require_credentials(config)              # or says which variable to set
    watcher = ConfigWatcher(workspace, on_change=apply).start()   # serve / acp hot reload

The reference for every key is docs/configuration.md.
"""

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
from coder_es.config.reload import ConfigWatcher, changed_sections
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
