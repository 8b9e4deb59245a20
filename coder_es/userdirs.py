"""Where coder-es keeps what belongs to the user rather than to one workspace's store.

Two XDG directories, both outside every store so that copying, deleting or damaging a store (or a
shell command run by the agent) cannot reach them:

- the config directory (``$XDG_CONFIG_HOME/coder-es``, default ``~/.config/coder-es``): the user
  config file and what the user decided (workspace trust);
- the data directory (``$XDG_DATA_HOME/coder-es``, default ``~/.local/share/coder-es``): keys and
  witnesses (the sealed-secret key, per-store witness files, signing keys).

A relative ``XDG_*`` value is invalid by the XDG spec and ignored.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

APP_DIRNAME = "coder-es"


def _base(environ: Mapping[str, str], variable: str, default: tuple[str, ...]) -> Path:
    value = environ.get(variable, "")
    if value and os.path.isabs(value):
        return Path(value)
    home = environ.get("HOME")
    return (Path(home) if home else Path.home()).joinpath(*default)


def user_config_dir(environ: Mapping[str, str] = os.environ) -> Path:
    return _base(environ, "XDG_CONFIG_HOME", (".config",)) / APP_DIRNAME


def user_data_dir(environ: Mapping[str, str] = os.environ) -> Path:
    return _base(environ, "XDG_DATA_HOME", (".local", "share")) / APP_DIRNAME


def user_cache_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """``$XDG_CACHE_HOME/coder-es`` (default ``~/.cache/coder-es``): what can be rebuilt at any
    time (the command line's compiled code, ``coder_es.cli.codecache``)."""
    return _base(environ, "XDG_CACHE_HOME", (".cache",)) / APP_DIRNAME


def protected_user_dirs(environ: Mapping[str, str] = os.environ) -> tuple[Path, ...]:
    """The user's coder-es directories that no command run by the agent may write."""
    return (user_config_dir(environ), user_data_dir(environ))
