"""Permission subjects for path arguments: workspace-relative inside, absolute outside.

The path is resolved the way the workspace sandbox resolves it (realpath: ``..`` and symlinks
followed), so a rule on ``src/**`` cannot be dodged with ``src/../secrets`` or a symlink.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from coder_es.permissions.shell_parse import parse_shell
from coder_es.tools.base import Subject
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
    if real.startswith(real_root.rstrip("/") + "/"):
        return Subject("path", Path(os.path.relpath(real, real_root)).as_posix(), False)
    return Subject("path", Path(real).as_posix(), True)


def dir_subject(path: str | None, root: Path) -> Subject:
    """The directory a search covers ("." for the whole workspace)."""
    return path_subject(path or ".", root)


def command_subject(command: str, root: Path) -> Subject:
    """A shell command line's subject: the line, plus the files it writes (``write`` subjects)
    and the paths outside the workspace it names (``read`` subjects, like ``read`` of them)."""
    text = command.strip()
    related: dict[tuple[str, Subject], None] = {}
    for use in parse_shell(text).paths:
        if not use.known:
            if use.mode == "write":
                related[("write", Subject("path", use.path, opaque=True))] = None
            continue
        path = os.path.expanduser(use.path) if use.path.startswith("~") else use.path
        try:
            subject = path_subject(path, root)
        except ToolInputError:
            continue
        if use.mode == "write":
            related[("write", subject)] = None
        elif subject.outside:
            related[("read", subject)] = None
    return Subject("command", text, related=tuple(related))
