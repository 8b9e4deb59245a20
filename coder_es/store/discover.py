"""Finding a workspace's store the way git finds ``.git``.

From the current directory upwards, the first directory holding a ``.coder-es/`` directory is the
workspace root, so ``cd src/pkg && coder-es sessions`` lists the project's sessions instead of
creating an empty store in ``src/pkg``. ``$CODER_ES_CEILING_DIRECTORIES`` (absolute paths
separated by ``:``, like git's ``GIT_CEILING_DIRECTORIES``) stops the walk below those
directories: they and their parents are not searched. The walk also stops at a file-system
boundary, like git without ``GIT_DISCOVERY_ACROSS_FILESYSTEM``.

A ``.coder-es/`` holding only what coder-es leaves in any workspace it works in (the scratch
directory ``tmp/``, shell transactions ``tx/``) is not a store: the walk goes on above it, so a
stray ``tmp/`` in a sub-directory never hides the project's store. An empty one (the user's
``mkdir .coder-es``) marks the workspace, as before.

Whoever owns a workspace decides what coder-es finds there (its project config, transaction
journals, the store itself), so a workspace or a ``.coder-es/`` owned by another user is refused,
as git refuses a repository of another user since CVE-2022-24765 (``safe.directory``):
``check_owner`` names it and the setting that accepts it, ``$CODER_ES_SAFE_DIRECTORIES``
(absolute paths separated by ``:``, or ``*`` for any).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from coder_es.errors import UsageError

STORE_DIRNAME = ".coder-es"
CEILING_ENV = "CODER_ES_CEILING_DIRECTORIES"
SAFE_ENV = "CODER_ES_SAFE_DIRECTORIES"
LEFTOVERS = frozenset({"tmp", "tx", ".gitignore"})
"""What coder-es may leave in a ``.coder-es/`` that holds no store (see the module docstring)."""


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
        if holds_store(current / STORE_DIRNAME):
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


def holds_store(path: Path) -> bool:
    """Whether ``path`` (a ``.coder-es``) marks a workspace: it holds more than the leftovers of
    coder-es's work, or nothing at all (made by the user, as ``git init`` makes ``.git``)."""
    try:
        names = set(os.listdir(path))
    except OSError:
        return False
    return not names or not names <= LEFTOVERS


class ForeignOwnerError(UsageError):
    """A workspace or ``.coder-es/`` owned by another user (see the module docstring)."""

    def __init__(self, path: Path, uid: int) -> None:
        self.path = path
        super().__init__(
            f"{path} is owned by another user (uid {uid}); coder-es does not use a workspace or "
            f"a {STORE_DIRNAME}/ that someone else controls. If you trust it, add it to "
            f"{SAFE_ENV} (e.g. export {SAFE_ENV}={path})"
        )


def check_owner(workspace: Path, environ: Mapping[str, str] = os.environ) -> None:
    """Raise ``ForeignOwnerError`` when ``workspace`` or its ``.coder-es`` (itself, or where a
    link leads) belongs to another user, unless ``$CODER_ES_SAFE_DIRECTORIES`` accepts it."""
    safe = _safe(environ)
    if "*" in safe or os.path.realpath(workspace) in safe:
        return  # the workspace accepted: its .coder-es with it
    store = workspace / STORE_DIRNAME
    for path, follow in ((workspace, True), (store, False), (store, True)):
        try:
            uid = (os.stat if follow else os.lstat)(path).st_uid
        except OSError:
            continue
        if uid != os.geteuid() and os.path.realpath(path) not in safe:
            raise ForeignOwnerError(path, uid)


def _safe(environ: Mapping[str, str]) -> set[str]:
    value = environ.get(SAFE_ENV, "")
    return {
        p if p == "*" else os.path.realpath(p)
        for p in value.split(os.pathsep)
        if p == "*" or os.path.isabs(p)
    }
