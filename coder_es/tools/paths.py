"""Permission subjects for path arguments: workspace-relative inside, absolute outside.

The path is resolved the way the workspace sandbox resolves it (realpath: ``..`` and symlinks
followed), so a rule on ``src/**`` cannot be dodged with ``src/../secrets`` or a symlink.
"""

from __future__ import annotations

import os
import re
import stat
from functools import lru_cache
from pathlib import Path

from coder_es.permissions.protected import changes_protected
from coder_es.permissions.shell_parse import parse_shell
from coder_es.permissions.subject import Subject
from coder_es.tools.schema import ToolInputError


@lru_cache(maxsize=16)
def _real_root(root: str) -> str:
    return os.path.realpath(root)


def path_subject(path: str, root: Path) -> Subject:
    if not path or "\0" in path:
        msg = f"invalid path {path!r}: it is empty or contains a NUL byte"
        raise ToolInputError(msg)
    real_root = _real_root(str(root))
    real = os.path.realpath(path if os.path.isabs(path) else os.path.join(real_root, path))
    if real == real_root:
        return Subject("path", ".", False)
    prefix = real_root.rstrip("/") + "/"
    if real.startswith(prefix):
        # realpath's result is normal: the part below the root is the relative path.
        return Subject("path", real[len(prefix) :], False)
    return Subject("path", real, True)


def dir_subject(path: str | None, root: Path) -> Subject:
    """The directory a search covers ("." for the whole workspace)."""
    return path_subject(path or ".", root)


def command_subject(command: str, root: Path) -> Subject:
    """A shell command line's subject: the line, plus the files it writes (``write`` subjects)
    and the paths outside the workspace it names (``read`` subjects, like ``read`` of them).

    A path the shell may turn into one outside the workspace that cannot be pinned down
    (``~-``, ``~user``, a brace expansion too large to list, a glob with too many matches) is a
    ``read`` outside: under the read-only presets it asks."""
    text = command.strip()
    related: dict[tuple[str, Subject], None] = {}
    links: dict[str, bool | None] = {}
    line = parse_shell(text)
    # ``PWD=/etc; cat ~+/passwd``: bash's ``~+`` is then not the workspace.
    pwd_moved = "PWD" in line.environment
    for use in line.paths:
        if not use.known:
            if use.mode == "write":
                related[("write", Subject("path", use.path, opaque=True))] = None
            continue
        unsure = use.unsure or (pwd_moved and use.path.startswith("~+"))
        for subject in _subjects(use.path, use.glob, unsure, root, links):
            if use.mode == "write":
                related[("write", subject)] = None
            elif subject.outside:
                related[("read", subject)] = None
            elif not use.reader and changes_protected(subject.text):
                # ``cp x .git/hooks/pre-commit``, ``cd .git``: a write there always asks.
                related[("write", subject)] = None
    return Subject("command", text, related=tuple(related))


_GLOB_LIMIT = 256  # paths a glob may match before it counts as an unknown path
_GLOB = re.compile(r"[*?\[]")


def _subjects(
    path: str, glob: bool, unsure: bool, root: Path, links: dict[str, bool | None]
) -> list[Subject]:
    """The subjects of one path a line names: tilde expanded as bash does, a glob as every
    path it could match. ``links``: which paths are links (None: absent), as found so far."""
    if unsure:
        return [Subject("path", path, True)]
    if path.startswith("~"):
        user, slash, rest = path[1:].partition("/")
        if user == "":
            path = os.path.expanduser("~") + slash + rest
        elif user == "+":  # $PWD: the line starts in the workspace
            path = os.path.join(_real_root(str(root)), rest)
        else:
            # ``~-`` ($OLDPWD), ``~+1``/``~-1``/``~1`` (the directory stack), ``~user``: not
            # the workspace's to know.
            return [Subject("path", path, True)]
    paths = [path]
    if glob and _GLOB.search(path):
        matches = _glob_superset(path, _real_root(str(root)))
        if matches is None:
            return [Subject("path", path, True)]
        paths += matches
    real_root = _real_root(str(root))
    subjects = []
    for candidate in paths:
        inside = None if candidate.startswith("/") else _below(candidate, real_root, links)
        if inside is not None:
            subjects.append(Subject("path", inside, False))
            continue
        try:
            subjects.append(path_subject(candidate, root))
        except ToolInputError:
            continue
    return subjects


def _below(path: str, real_root: str, links: dict[str, bool | None]) -> str | None:
    """A relative path's workspace-relative name when it is provably inside without resolving
    the root again: no ``..``, and no link on the way (each existing component is lstat'ed
    once per line, ``links``; below a name that does not exist nothing can be a link).
    None: resolve it with ``path_subject``."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts or "\0" in path:
        return None
    if not parts:
        return "."
    current = real_root
    for part in parts:
        current = f"{current}/{part}" if current != "/" else f"/{part}"
        if current in links:
            link = links[current]
        else:
            try:
                link = stat.S_ISLNK(os.lstat(current).st_mode)
            except OSError:
                link = None  # does not exist: nothing below it is a link
            links[current] = link
        if link is None:
            break
        if link:
            return None
    return "/".join(parts)


def _glob_superset(pattern: str, base: str) -> list[str] | None:
    """Every existing path ``pattern`` could match, whatever the shell's glob options: a
    component with a glob character stands for every entry of its directory (and ``.`` and
    ``..`` when it starts with a dot, as bash before 5.2 matched them). None: too many."""
    current = ["/"] if pattern.startswith("/") else [base]
    for part in pattern.split("/"):
        if not part:
            continue
        if not _GLOB.search(part):
            current = [os.path.join(d, part) for d in current]
            continue
        found: list[str] = []
        for directory in current:
            try:
                names = os.listdir(directory)
            except OSError:
                continue
            if part.startswith("."):
                names += [".", ".."]
            found += (os.path.join(directory, n) for n in names)
            if len(found) > _GLOB_LIMIT:
                return None
        current = found
    return current
