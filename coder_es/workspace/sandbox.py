"""The path sandbox: every path the agent names is resolved (realpath) inside the workspace root.

``..``, absolute paths elsewhere and symlinks that lead out are refused unless the caller opts in
(``outside_ok=True`` once the permission layer allowed it, or a directory listed in
``allowed_outside``). Inside paths are named in events relative to the root with POSIX separators;
an allowed outside path is named by its absolute POSIX path.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from coder_es.workspace.errors import InvalidPathError, PathOutsideWorkspaceError


@dataclass(frozen=True, slots=True)
class ResolvedPath:
    """``abs`` is the real path on disk; ``rel`` is the name used in events and views."""

    abs: Path
    rel: str
    inside: bool


class Sandbox:
    def __init__(
        self, root: str | os.PathLike[str], allowed_outside: Iterable[str | os.PathLike[str]] = ()
    ) -> None:
        real = os.path.realpath(os.fspath(root))
        if not os.path.isdir(real):
            msg = f"workspace root {root} is not a directory"
            raise InvalidPathError(msg)
        self.root = Path(real)
        self.allowed_outside = tuple(Path(os.path.realpath(os.fspath(p))) for p in allowed_outside)

    def resolve(self, path: str | os.PathLike[str], *, outside_ok: bool = False) -> ResolvedPath:
        raw = os.fspath(path)
        if not raw or "\0" in raw:
            msg = f"invalid path {raw!r}: it is empty or contains a NUL byte"
            raise InvalidPathError(msg)
        joined = raw if os.path.isabs(raw) else os.path.join(self.root, raw)
        real = Path(os.path.realpath(joined))
        if _within(real, self.root):
            rel = real.relative_to(self.root).as_posix()
            if rel == ".":
                msg = f"{raw!r} is the workspace root, not a file"
                raise InvalidPathError(msg)
            return ResolvedPath(real, rel, True)
        if outside_ok or any(_within(real, allowed) for allowed in self.allowed_outside):
            return ResolvedPath(real, PurePosixPath(real.as_posix()).as_posix(), False)
        raise PathOutsideWorkspaceError(raw, str(real), str(self.root))

    def rel_of(self, real: Path) -> str:
        """The event name of a path already known to be real and inside the root."""
        return real.relative_to(self.root).as_posix()


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents
