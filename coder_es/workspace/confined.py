"""coder-es's own hands on the workspace: every path it writes outside the sandbox goes here.

A restoration (rewind, checkout, fork), a shell transaction's apply and its crash recovery write
files named by recorded data (events, a journal), in a tree that an agent's command or a cloned
repository may have shaped: a directory replaced by a symlink to ``.coder-es`` (or to ``~``) would
carry a write somewhere the name does not say. So a name is never handed to the kernel as a path
to resolve. ``ConfinedDir`` holds the root as a directory descriptor and opens each directory
component from its parent's descriptor with ``O_NOFOLLOW | O_DIRECTORY`` (the ``openat`` way):
a symlink or a file where a directory is expected is refused, so what is written is exactly the
recorded name, under the root, whatever the tree looks like. The final component is checked the
same way (``lstat`` from the directory descriptor): a symlink there is refused too.

The operations then work on ``/proc/self/fd/<dir>/<name>``: the kernel resolves the magic link to
the directory already opened (not to its name), so the ordinary file helpers
(``coder_es.workspace.atomic``) run unchanged and cannot be steered elsewhere by a link swapped in
afterwards. Directory descriptors are opened once per directory and kept until ``close``.

Names that are refused whatever the tree: ``.coder-es/`` (the store, its configuration, the
transaction journals), ``.git/hooks/`` and ``.git/config`` (code git runs as the user).
"""

from __future__ import annotations

import errno
import os
import stat as stat_mod
import threading
from pathlib import Path
from types import TracebackType

from coder_es.errors import CoderESError

STORE_DIRNAME = ".coder-es"
GIT_CONTROL = (".git/hooks", ".git/config")
"""Inside ``.git``, what makes git run code (hooks; ``core.fsmonitor``, ``core.hooksPath``...)."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PROC_FD = Path("/proc/self/fd")
_HAS_PROC = _PROC_FD.is_dir()


class RefusedPathError(CoderESError):
    """coder-es does not write this name: protected, or not where its name says (a link)."""

    def __init__(self, path: str, why: str) -> None:
        self.path = path
        self.why = why
        super().__init__(f"{path}: {why}; not written")


def refusal(rel: str, *, removing: bool = False) -> str | None:
    """Why a workspace-relative name is never written by coder-es itself (None: it may be).
    ``removing``: a deletion, which cannot make git run anything (only the store is refused)."""
    if _under(rel, STORE_DIRNAME):
        return f"{STORE_DIRNAME}/ holds the store and its configuration"
    if removing:
        return None
    for control in GIT_CONTROL:
        if _under(rel, control):
            return f"{control} makes git run code as you"
    return None


def check_name(rel: str) -> list[str]:
    """The components of a relative, normalised name; ``RefusedPathError`` otherwise."""
    if not isinstance(rel, str) or not rel or "\0" in rel or rel.startswith("/"):
        raise RefusedPathError(repr(rel), "not a relative path")
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise RefusedPathError(rel, "not a normalised relative path")
    return parts


class ConfinedDir:
    """A directory tree written only through descriptors (see the module docstring).

    ``guard``: refuse the protected names (the workspace); off for a transaction's own upper
    directory, which is read from, never written into.
    """

    def __init__(self, root: str | os.PathLike[str], *, guard: bool = True) -> None:
        self.root = Path(root)
        self.guard = guard
        # The root itself may not be a link either (callers pass real paths).
        self._root_fd = os.open(self.root, _DIR_FLAGS)
        self._fds: dict[str, int] = {"": self._root_fd}
        self._lock = threading.Lock()

    def __enter__(self) -> ConfinedDir:
        return self

    def __exit__(
        self,
        _t: type[BaseException] | None,
        _e: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            fds, self._fds = self._fds, {}
        for fd in fds.values():
            os.close(fd)

    # ------------------------------------------------------------------ resolving

    def parent(self, rel: str, *, create: bool = False, removing: bool = False) -> tuple[int, str]:
        """The descriptor of ``rel``'s directory (owned by this object) and its last name.

        ``create``: make missing directories (mode 0777 less the umask, as ``mkdir -p``);
        otherwise a missing one raises ``FileNotFoundError``. ``removing``: see ``refusal``.
        """
        parts = check_name(rel)
        if self.guard:
            why = refusal(rel, removing=removing)
            if why is not None:
                raise RefusedPathError(rel, why)
        return self._dir(parts[:-1], create), parts[-1]

    def path(
        self, rel: str, *, create: bool = False, link_ok: bool = False, removing: bool = False
    ) -> Path:
        """A path naming ``rel`` through its directory's descriptor, for the ordinary file
        calls. A symlink at ``rel`` is refused unless ``link_ok`` (an operation on the link
        itself: unlink, replace)."""
        fd, name = self.parent(rel, create=create, removing=removing)
        if not link_ok and self.is_link(fd, name):
            raise RefusedPathError(rel, "is a symbolic link, not the file recorded")
        return self.via(fd, name)

    def lstat(self, rel: str) -> os.stat_result | None:
        """``rel``'s own status, None when it (or a directory above it) does not exist."""
        try:
            fd, name = self.parent(rel)
            return os.lstat(name, dir_fd=fd)
        except (FileNotFoundError, NotADirectoryError):
            return None

    def read(self, rel: str) -> bytes | None:
        """A regular file's bytes, None when absent; a link or a directory is refused."""
        try:
            fd, name = self.parent(rel)
            ffd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise RefusedPathError(rel, "is a symbolic link, not the file recorded") from e
            raise
        try:
            if not stat_mod.S_ISREG(os.fstat(ffd).st_mode):
                raise RefusedPathError(rel, "is not a regular file")
            with os.fdopen(ffd, "rb", closefd=False) as f:
                return f.read()
        finally:
            os.close(ffd)

    def entries(self, rel: str) -> list[tuple[str, os.stat_result]]:
        """The names in directory ``rel`` with their own status (``lstat``)."""
        fd, name = self.parent(rel)
        dfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
        try:
            names = os.listdir(dfd)
            return [(n, os.lstat(n, dir_fd=dfd)) for n in names]
        finally:
            os.close(dfd)

    def chmod(self, rel: str, mode: int) -> None:
        """Set the mode of the file or directory ``rel`` itself (a link is refused)."""
        fd, name = self.parent(rel)
        # O_PATH needs no read permission (a mode-000 file) and opens a link as itself.
        target = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        try:
            st = os.fstat(target)
            if stat_mod.S_ISLNK(st.st_mode):
                raise RefusedPathError(rel, "is a symbolic link")
            if stat_mod.S_IMODE(st.st_mode) != mode:
                os.chmod(_PROC_FD / str(target), mode)
        finally:
            os.close(target)

    @staticmethod
    def via(fd: int, name: str) -> Path:
        return _PROC_FD / str(fd) / name

    @staticmethod
    def is_link(fd: int, name: str) -> bool:
        try:
            return stat_mod.S_ISLNK(os.lstat(name, dir_fd=fd).st_mode)
        except FileNotFoundError:
            return False

    def _dir(self, parts: list[str], create: bool) -> int:
        """The descriptor of the directory ``parts`` (relative to the root), opened component by
        component from the deepest one already open."""
        key = "/".join(parts)
        with self._lock:
            found = self._fds.get(key)
        if found is not None:
            return found
        if not _HAS_PROC:
            raise OSError(errno.ENOSYS, "coder-es needs /proc/self/fd to write files safely")
        depth = len(parts)
        with self._lock:
            while depth > 0 and "/".join(parts[:depth]) not in self._fds:
                depth -= 1
            fd = self._fds["/".join(parts[:depth])]
        while depth < len(parts):
            name = parts[depth]
            depth += 1
            sub = "/".join(parts[:depth])
            opened = self._open_dir(fd, name, sub, create)
            with self._lock:
                fd = self._fds.setdefault(sub, opened)
            if fd != opened:
                os.close(opened)  # another thread opened it meanwhile
        return fd

    def _open_dir(self, parent: int, name: str, rel: str, create: bool) -> int:
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            if not create:
                raise
        except OSError as e:
            if e.errno not in (errno.ENOTDIR, errno.ELOOP):
                raise
            if stat_mod.S_ISLNK(os.lstat(name, dir_fd=parent).st_mode):
                raise RefusedPathError(
                    rel, "is a symbolic link where a directory was recorded"
                ) from e
            msg = "a file where a directory is expected"
            raise NotADirectoryError(errno.ENOTDIR, msg, rel) from e
        try:
            os.mkdir(name, 0o777, dir_fd=parent)
        except FileExistsError:
            pass  # made meanwhile: opened (and checked) below
        return self._open_dir(parent, name, rel, False)


def _under(rel: str, prefix: str) -> bool:
    return rel == prefix or rel.startswith(prefix + "/")
