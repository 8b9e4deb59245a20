"""Which files of a workspace the graph sees: source files and the configs resolution reads,
minus vendored directories and whatever ``.gitignore`` files exclude.

``.gitignore`` lines are parsed by the workspace's matcher (``coder_es.workspace.ignore``); the
rules are kept here from the files' contents the graph holds (no ``git`` subprocess, no reading
the disk again), so one changed path is checked in microseconds during an incremental update, and
a workspace that is not a git repository is handled the same way. Git's rules apply: patterns
with a slash are anchored to their ``.gitignore``'s directory, ``**`` spans directories, a
trailing slash matches only directories, ``!`` re-includes, the last matching rule wins, and
nothing inside an excluded directory can be re-included. Symbolic links are not followed (a link
may point outside the workspace); files over ``MAX_FILE_BYTES`` are skipped as generated.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path

from coder_es.workspace.ignore import IgnoreRule, parse_gitignore
from projections.depgraph.languages import language_for

VENDORED_DIRS = frozenset(
    {
        ".git", ".hg", ".svn", "node_modules", "bower_components", ".venv", "venv",
        "__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".tox", ".nox", ".eggs",
        ".coder-es", "site-packages", ".hypothesis",
    }
)  # fmt: skip
MAX_FILE_BYTES = 1 << 20

_CONFIG_NAMES = frozenset({"go.mod", "Cargo.toml", ".gitignore"})
_TSCONFIG = re.compile(r"^(?:ts|js)config(?:\.[\w.-]+)?\.json$")


def is_config(path: str) -> bool:
    """Files the resolvers read (module paths, path aliases, crates) or the scan obeys."""
    name = path.rsplit("/", 1)[-1]
    return name in _CONFIG_NAMES or bool(_TSCONFIG.match(name))


def is_tracked_kind(path: str) -> bool:
    return language_for(path) is not None or is_config(path)


def in_vendored_dir(path: str) -> bool:
    return any(part in VENDORED_DIRS for part in path.split("/")[:-1])


class IgnoreRules:
    """The rules of a set of ``.gitignore`` files (path of each -> its content)."""

    def __init__(self, gitignores: Mapping[str, bytes]) -> None:
        # (directory of the .gitignore with a trailing "/", or "" for the root; its rule).
        rules: list[tuple[str, IgnoreRule]] = []
        # Shallower files first, so a deeper file's rules come later and win.
        for path in sorted(gitignores, key=lambda p: (p.count("/"), p)):
            base = path.rsplit("/", 1)[0] + "/" if "/" in path else ""
            text = gitignores[path].decode("utf-8", "replace")
            rules.extend((base, rule) for rule in parse_gitignore(text))
        self._rules = tuple(rules)

    def __bool__(self) -> bool:
        return bool(self._rules)

    def _matches(self, path: str, is_dir: bool) -> bool:
        ignored = False
        for base, rule in self._rules:
            if rule.dir_only and not is_dir:
                continue
            if base and not path.startswith(base):
                continue
            if rule.regex.match(path[len(base) :]):
                ignored = not rule.negate
        return ignored

    def ignored(self, path: str, is_dir: bool = False) -> bool:
        """Whether ``path`` (relative, with ``/``) is excluded, itself or through a parent."""
        if not self._rules:
            return False
        parts = path.split("/")
        for i in range(1, len(parts)):
            if self._matches("/".join(parts[:i]), True):
                return True
        return self._matches(path, is_dir)


def scan(root: Path) -> dict[str, bytes]:
    """The tracked files under ``root`` (relative ``/`` paths -> content), sorted by path."""
    gitignores: dict[str, bytes] = {}
    found: dict[str, bytes] = {}
    rules = IgnoreRules({})

    def walk(directory: Path, rel: str) -> None:
        nonlocal rules
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            return
        for entry in entries:
            if entry.name == ".gitignore" and entry.is_file(follow_symlinks=False):
                path = rel + entry.name
                gitignores[path] = _read(entry.path) or b""
                rules = IgnoreRules(gitignores)
        for entry in entries:
            path = rel + entry.name
            if entry.is_symlink():
                continue
            if entry.is_dir():
                if entry.name in VENDORED_DIRS or rules.ignored(path, True):
                    continue
                walk(Path(entry.path), path + "/")
            elif entry.is_file() and is_tracked_kind(path) and not rules.ignored(path):
                if entry.stat().st_size > MAX_FILE_BYTES:
                    continue
                data = _read(entry.path)
                if data is not None:
                    found[path] = data

    walk(root, "")
    return dict(sorted(found.items()))


def _read(path: str) -> bytes | None:
    """A regular file's bytes, read without following a link: the entry may have been replaced
    since the scan saw it (by a link to a file outside the workspace, or a FIFO that would
    block the read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            return f.read()
        except OSError:
            return None
