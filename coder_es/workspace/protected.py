"""Paths the agent's tools never write, whatever the permission rules say.

The project's ``.coder-es/`` holds its config, which decides the agent's permissions once the
user trusts it: an agent able to write it could grant itself anything the next time the user
trusts the file or hands its content around. The user's coder-es directories hold the user config
and the workspace trust records (``coder_es.userdirs``). Writes there are refused in the
workspace layer, below every permission rule; reading stays allowed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from coder_es.store.discover import STORE_DIRNAME
from coder_es.userdirs import protected_user_dirs
from coder_es.workspace.errors import ProtectedPathError
from coder_es.workspace.sandbox import ResolvedPath


def check_writable(rp: ResolvedPath, root: Path, user_dirs: Iterable[Path] | None = None) -> None:
    """Raise ``ProtectedPathError`` when a tool must not write ``rp`` (resolved in ``root``)."""
    # Real paths on both sides: a `.coder-es` that is a symlink to elsewhere is protected where
    # it leads, and a link to `.coder-es` under another name is caught by its target.
    store = Path(os.path.realpath(root / STORE_DIRNAME))
    if _within(rp.abs, store) or (rp.inside and rp.rel.split("/", 1)[0] == STORE_DIRNAME):
        raise ProtectedPathError(
            rp.rel,
            f"{STORE_DIRNAME}/ holds the project's configuration and store; change them "
            "yourself, outside the agent",
        )
    for directory in protected_user_dirs() if user_dirs is None else user_dirs:
        if _within(rp.abs, Path(os.path.realpath(directory))):
            raise ProtectedPathError(
                rp.rel, f"{directory} holds your coder-es configuration and workspace trust records"
            )


def _within(path: Path, directory: Path) -> bool:
    return path == directory or directory in path.parents
