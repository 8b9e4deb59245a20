"""Finding a workspace's store the way git finds ``.git``.

From the current directory upwards, the first directory holding a ``.coder-es/`` directory is the
workspace root, so ``cd src/pkg && coder-es sessions`` lists the project's sessions instead of
creating an empty store in ``src/pkg``. ``$CODER_ES_CEILING_DIRECTORIES`` (absolute paths
separated by ``:``, like git's ``GIT_CEILING_DIRECTORIES``) stops the walk below those
directories: they and their parents are not searched. The walk also stops at a file-system
boundary, like git without ``GIT_DISCOVERY_ACROSS_FILESYSTEM``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

STORE_DIRNAME = ".coder-es"
CEILING_ENV = "CODER_ES_CEILING_DIRECTORIES"


@dataclass(frozen=True)
class Discovery:
    root: Path
    """The workspace: where ``.coder-es/`` was found, else the start directory."""
    found: bool
    searched: tuple[Path, ...]
    """The directories looked at, nearest first (for "no store in X or its parents")."""

    def describe_search(self) -> str:
        if len(self.searched) <= 1:
            return str(self.root)
        return f"{self.searched[0]} or its parents up to {self.searched[-1]}"


def _ceilings(environ: Mapping[str, str]) -> set[str]:
    value = environ.get(CEILING_ENV, "")
    return {os.path.normpath(p) for p in value.split(os.pathsep) if p and os.path.isabs(p)}


def discover_workspace(start: Path, environ: Mapping[str, str] = os.environ) -> Discovery:
    """The nearest directory at or above ``start`` (absolute) holding a ``.coder-es`` directory."""
    ceilings = _ceilings(environ)
    searched: list[Path] = []
    current = start
    try:
        device = start.stat().st_dev
    except OSError:
        return Discovery(start, False, (start,))
    while True:
        searched.append(current)
        if (current / STORE_DIRNAME).is_dir():
            return Discovery(current, True, tuple(searched))
        parent = current.parent
        if parent == current or str(parent) in ceilings:
            break
        try:
            if parent.stat().st_dev != device:
                break
        except OSError:
            break
        current = parent
    return Discovery(start, False, tuple(searched))
