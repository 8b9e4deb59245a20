"""Which files of a workspace the graph sees: source files and the configs resolution reads,
minus vendored directories and whatever ``.gitignore`` files exclude.

The ``.gitignore`` matching is our own (no ``git`` subprocess) so a single changed path can be
checked in microseconds during an incremental update, and a workspace that is not a git
repository is handled the same way. It follows git's rules: patterns with a slash are anchored to
their ``.gitignore``'s directory, ``**`` spans directories, a trailing slash matches only
directories, ``!`` re-includes, the last matching rule wins, and nothing inside an excluded
directory can be re-included. Symbolic links are not followed (a link may point outside the
workspace); files over ``MAX_FILE_BYTES`` are skipped as generated.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

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


@dataclass(frozen=True)
class _Rule:
    base: str  # directory of the .gitignore ("" for the root), with a trailing slash if not ""
    pattern: re.Pattern[str]
    negated: bool
    dir_only: bool


class IgnoreRules:
    """The rules of a set of ``.gitignore`` files (path of each -> its content)."""

    def __init__(self, gitignores: Mapping[str, bytes]) -> None:
        rules: list[_Rule] = []
        # Shallower files first, so a deeper file's rules come later and win.
        for path in sorted(gitignores, key=lambda p: (p.count("/"), p)):
            base = path.rsplit("/", 1)[0] + "/" if "/" in path else ""
            for line in gitignores[path].decode("utf-8", "replace").splitlines():
                rule = _compile(base, line)
                if rule is not None:
                    rules.append(rule)
        self._rules = tuple(rules)

    def __bool__(self) -> bool:
        return bool(self._rules)

    def _matches(self, path: str, is_dir: bool) -> bool:
        ignored = False
        for rule in self._rules:
            if rule.dir_only and not is_dir:
                continue
            if rule.base and not path.startswith(rule.base):
                continue
            if rule.pattern.fullmatch(path[len(rule.base) :]):
                ignored = not rule.negated
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


def _compile(base: str, line: str) -> _Rule | None:
    line = line.rstrip("\n\r")
    if not line or line.startswith("#"):
        return None
    # Trailing spaces are dropped unless escaped.
    while line.endswith(" ") and not line.endswith("\\ "):
        line = line[:-1]
    negated = line.startswith("!")
    if negated or line.startswith(("\\!", "\\#")):
        line = line[1:]
    dir_only = line.endswith("/")
    line = line.rstrip("/")
    if not line:
        return None
    anchored = "/" in line
    line = line.lstrip("/")
    body = _glob_to_regex(line)
    regex = body if anchored else f"(?:.*/)?{body}"
    return _Rule(base, re.compile(regex, re.S), negated, dir_only)


def _glob_to_regex(glob: str) -> str:
    out = []
    i, n = 0, len(glob)
    while i < n:
        c = glob[i]
        if glob.startswith("**/", i) and (i == 0 or glob[i - 1] == "/"):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("**", i) and i + 2 == n and (i == 0 or glob[i - 1] == "/"):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            j = glob.find("]", i + 2)
            if j < 0:
                out.append(re.escape(c))
                i += 1
                continue
            inner = glob[i + 1 : j]
            if inner.startswith("!"):
                inner = "^" + inner[1:]
            out.append("[" + inner.replace("\\", "\\\\") + "]")
            i = j + 1
        elif c == "\\" and i + 1 < n:
            out.append(re.escape(glob[i + 1]))
            i += 2
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


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
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None
