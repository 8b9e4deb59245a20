"""A command's exact changes: the entries of its overlay's upper directory.

Overlayfs (mounted with ``userxattr``) leaves in the upper directory exactly what the command
changed: files it created or modified (copied up whole), whiteouts (character devices 0/0) for
what it deleted, directories marked opaque (xattr ``user.overlay.opaque``) where it removed a
directory and made a new one, symlinks, and the fifos or sockets it made. Walking it costs time
proportional to what changed, not to the size of the workspace.

Setuid and setgid bits never leave the walk (``UpperEntry.stripped`` says which were removed, for
the tool result), unless the path had them before (``keep_users_bits``); fifos, sockets and
devices are ``special`` entries, which are never applied.

Names are ``str`` with surrogate escapes for bytes that are not UTF-8 (``os.fsdecode``).
"""

from __future__ import annotations

import os
import stat as stat_mod
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Literal

OPAQUE_XATTR = "user.overlay.opaque"
REDIRECT_XATTR = "user.overlay.redirect"
PRIVILEGE_BITS = stat_mod.S_ISUID | stat_mod.S_ISGID

Kind = Literal["file", "deleted", "dir", "opaque_dir", "symlink", "special"]


@dataclass(frozen=True, slots=True)
class UpperEntry:
    """One entry of the upper directory. ``path`` is relative to the workspace, ``/``-separated."""

    path: str
    kind: Kind
    mode: int  # permission bits (files, directories)
    source: str  # the entry's absolute path in the upper directory
    link: str = ""  # a symlink's target
    stripped: int = 0
    """Setuid/setgid bits the command set, removed from ``mode``: a file made setuid inside
    the sandbox (where the command is root of its own namespace) would run with the rights of
    its owner outside it."""


def walk_upper(upper: str) -> Iterator[UpperEntry]:
    """Every entry, parents before their children (a directory's own entry comes first)."""
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        base = os.path.join(upper, rel_dir) if rel_dir else upper
        try:
            with os.scandir(base) as it:
                entries = sorted(it, key=lambda e: e.name)
        except FileNotFoundError:
            continue
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            st = entry.stat(follow_symlinks=False)
            mode = stat_mod.S_IMODE(st.st_mode)
            stripped = mode & PRIVILEGE_BITS
            mode &= ~PRIVILEGE_BITS
            if stat_mod.S_ISDIR(st.st_mode):
                kind: Kind = "opaque_dir" if _opaque(entry.path) else "dir"
                yield UpperEntry(rel, kind, mode, entry.path, stripped=stripped)
                stack.append(rel)
            elif stat_mod.S_ISREG(st.st_mode):
                yield UpperEntry(rel, "file", mode, entry.path, stripped=stripped)
            elif stat_mod.S_ISLNK(st.st_mode):
                yield UpperEntry(rel, "symlink", mode, entry.path, os.readlink(entry.path))
            elif stat_mod.S_ISCHR(st.st_mode) and st.st_rdev == 0:
                yield UpperEntry(rel, "deleted", mode, entry.path)
            else:
                yield UpperEntry(rel, "special", mode, entry.path)


def keep_users_bits(entry: UpperEntry, workspace: str) -> UpperEntry:
    """``entry`` with the setuid/setgid bits its path already has in the workspace given back:
    those are the user's (a setgid directory shared by a group, copied up because the command
    wrote in it), never the command's to remove."""
    try:
        st = os.lstat(os.path.join(workspace, entry.path))
    except OSError:
        return entry
    same_type = stat_mod.S_ISDIR(st.st_mode) == (entry.kind in ("dir", "opaque_dir"))
    users = stat_mod.S_IMODE(st.st_mode) & entry.stripped if same_type else 0
    if not users:
        return entry
    return replace(entry, mode=entry.mode | users, stripped=entry.stripped & ~users)


def _opaque(path: str) -> bool:
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError:
        return False
    if REDIRECT_XATTR in names:
        # A directory renamed within the overlay; mounts made with ``userxattr`` refuse such
        # renames (EXDEV, so ``mv`` copies), but treat one as a new directory if it appears.
        return True
    if OPAQUE_XATTR not in names:
        return False
    try:
        return os.getxattr(path, OPAQUE_XATTR, follow_symlinks=False) == b"y"
    except OSError:
        return False
