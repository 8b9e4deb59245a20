"""A ``.gitignore`` matcher and the file walk that grep/find tools and the stat index share.

It follows gitignore(5): ``#`` comments, ``!`` negation, a trailing ``/`` for directories only,
patterns with an inner ``/`` anchored to their file's directory (others match a name at any
depth), ``*``, ``?``, ``[...]`` and ``**``. A deeper ``.gitignore`` takes precedence over its
parents, the last matching line of a file wins, ``.git/info/exclude`` comes last, and nothing
inside an ignored directory can be re-included (git does not look inside it either). It is pure
Python so listing needs no ``git`` subprocess and works in directories that are not repositories;
the tests compare it with ``git ls-files --exclude-standard``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

# Never listed, never snapshotted: git's own data and our store (it changes with every event).
ALWAYS_IGNORED = (".git", ".coder-es")

_CLASSES = {
    "[:alnum:]": "a-zA-Z0-9",
    "[:alpha:]": "a-zA-Z",
    "[:digit:]": "0-9",
    "[:lower:]": "a-z",
    "[:upper:]": "A-Z",
    "[:space:]": r"\s",
    "[:xdigit:]": "0-9a-fA-F",
}


@dataclass(frozen=True, slots=True)
class IgnoreRule:
    pattern: str
    regex: re.Pattern[str]
    negate: bool
    dir_only: bool


def parse_gitignore(text: str) -> list[IgnoreRule]:
    rules = []
    for raw in text.splitlines():
        rule = _parse_line(raw)
        if rule is not None:
            rules.append(rule)
    return rules


def _parse_line(raw: str) -> IgnoreRule | None:
    line = raw.rstrip("\r")
    if not line or line.startswith("#"):
        return None
    # Trailing spaces are dropped unless the last one is escaped.
    stripped = line.rstrip(" ")
    if stripped.endswith("\\") and len(stripped) < len(line):
        stripped += " "
    line = stripped
    negate = False
    if line.startswith("!"):
        negate, line = True, line[1:]
    elif line.startswith(("\\!", "\\#")):
        line = line[1:]
    dir_only = line.endswith("/")
    line = line.rstrip("/")
    if not line:
        return None
    anchored = "/" in line
    line = line.lstrip("/")
    body = _glob_to_regex(line)
    regex = re.compile(("" if anchored else "(?:.*/)?") + body + r"\Z", re.DOTALL)
    return IgnoreRule(raw, regex, negate, dir_only)


def _glob_to_regex(glob: str) -> str:
    out: list[str] = []
    i, n = 0, len(glob)
    while i < n:
        c = glob[i]
        if c == "*":
            if glob.startswith("**", i) and (i == 0 or glob[i - 1] == "/"):
                end = i + 2
                if end == n:
                    out.append(".*")
                    i = end
                    continue
                if glob[end] == "/":
                    out.append("(?:.*/)?")
                    i = end + 1
                    continue
            while i < n and glob[i] == "*":
                i += 1
            out.append("[^/]*")
            continue
        if c == "?":
            out.append("[^/]")
        elif c == "[":
            j = _class_end(glob, i)
            if j < 0:
                out.append(re.escape(c))
            else:
                out.append(_class_to_regex(glob[i + 1 : j]))
                i = j
        elif c == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(glob[i]))
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def _class_end(glob: str, start: int) -> int:
    j = start + 1
    if j < len(glob) and glob[j] in "!^":
        j += 1
    if j < len(glob) and glob[j] == "]":
        j += 1
    while j < len(glob):
        if glob.startswith("[:", j):
            k = glob.find(":]", j + 2)
            if k >= 0:
                j = k + 2
                continue
        if glob[j] == "]":
            return j
        j += 1
    return -1


def _class_to_regex(body: str) -> str:
    negate = body[:1] in ("!", "^")
    if negate:
        body = body[1:]
    parts = []
    i = 0
    while i < len(body):
        for name, chars in _CLASSES.items():
            if body.startswith(name, i):
                parts.append(chars)
                i += len(name)
                break
        else:
            ch = body[i]
            parts.append("\\" + ch if ch in "\\]^[" else ch)
            i += 1
    return "[" + ("^/" if negate else "") + "".join(parts) + "]"


class IgnoreMatcher:
    """Answers "is this path ignored?" for paths relative to the workspace root."""

    def __init__(
        self, root: str | os.PathLike[str], always: Iterable[str] = ALWAYS_IGNORED
    ) -> None:
        self.root = Path(root)
        self.always = frozenset(always)
        self._dirs: dict[str, list[IgnoreRule]] = {}
        exclude = self.root / ".git" / "info" / "exclude"
        self._exclude = parse_gitignore(_read_text(exclude))

    def rules_for(self, dir_rel: str) -> list[IgnoreRule]:
        """The rules of ``dir_rel``'s own ``.gitignore`` ("" is the root), cached."""
        rules = self._dirs.get(dir_rel)
        if rules is None:
            rules = parse_gitignore(_read_text(self.root / dir_rel / ".gitignore"))
            self._dirs[dir_rel] = rules
        return rules

    def forget(self, dir_rel: str) -> None:
        """Drop the cached rules of one directory (its ``.gitignore`` changed)."""
        self._dirs.pop(dir_rel, None)

    def is_ignored(self, rel: str, is_dir: bool) -> bool:
        """Whether ``rel`` itself matches; the walk never descends into ignored directories."""
        name = rel.rsplit("/", 1)[-1]
        if name in self.always:
            return True
        parts = rel.split("/")
        # Deepest .gitignore first: the first file with a matching line decides.
        for depth in range(len(parts) - 1, -1, -1):
            dir_rel = "/".join(parts[:depth])
            decision = _last_match(self.rules_for(dir_rel), "/".join(parts[depth:]), is_dir)
            if decision is not None:
                return decision
        decision = _last_match(self._exclude, rel, is_dir)
        return bool(decision)

    def walk(self, start: str = "", *, include_ignored: bool = False) -> Iterator[str]:
        """Files (and symlinks to files) under ``start``, depth first in name order.

        Symlinked directories are not followed (they may lead out of the root, or in circles),
        and a symlink whose target resolves outside the root is left out: whatever reads the
        walk's files (grep, the prompt's listing) must not reach outside the workspace through it.
        """
        real_root = os.path.realpath(self.root)
        stack = [start]
        while stack:
            dir_rel = stack.pop()
            try:
                with os.scandir(self.root / dir_rel) as it:
                    entries = sorted(it, key=lambda e: e.name)
            except (FileNotFoundError, NotADirectoryError, PermissionError):
                continue
            subdirs = []
            for entry in entries:
                rel = f"{dir_rel}/{entry.name}" if dir_rel else entry.name
                is_dir = entry.is_dir(follow_symlinks=False)
                if entry.name in self.always or (
                    not include_ignored and self.is_ignored(rel, is_dir)
                ):
                    continue
                if is_dir:
                    subdirs.append(rel)
                elif entry.is_symlink():
                    if _resolves_inside(entry.path, real_root) and entry.is_file():
                        yield rel
                elif entry.is_file(follow_symlinks=False):
                    yield rel
            stack.extend(reversed(subdirs))


def _resolves_inside(path: str, real_root: str) -> bool:
    try:
        real = os.path.realpath(path, strict=True)
    except OSError:  # dangling, a loop, or unreadable: nothing to read through it
        return False
    return real == real_root or real.startswith(real_root.rstrip("/") + "/")


def _last_match(rules: list[IgnoreRule], rel: str, is_dir: bool) -> bool | None:
    for rule in reversed(rules):
        if rule.dir_only and not is_dir:
            continue
        if rule.regex.match(rel):
            return not rule.negate
    return None


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError):
        return ""
