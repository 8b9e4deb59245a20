"""Atomic, compare-and-swap file replacement.

A write goes to a temporary file (fsynced, with the old file's mode) and is renamed over the
target only if the target still holds the content the merge was computed
against. The check and the rename happen under an advisory ``flock`` of the current file, so two
writers that both use this protocol (two agents, or an editor integration) can never lose each
other's update; a writer that does not lock can only slip into the microseconds between the check
and the rename. When the check fails nothing is written and the caller merges again; a caller
that keeps losing that race takes the lock *before* reading so that it makes
progress even against a writer that changes the file continuously (``file_lock_at``).

Every write names its file by its directory's descriptor (``coder_es.workspace.confined``), so
there is one way to write a file: ``compare_and_swap_at`` is the three steps for one file, each
flushed; a caller writing many files (a restoration) runs them itself: ``stage_at`` every file,
one ``sync_filesystem``, ``install_at`` each (the same check and rename), one more
``sync_filesystem`` for the directory entries. ``read_current`` reads a file by path for callers
that only read.

Where temporary files live. A process killed between creating its temporary file and the rename
(kill -9, a power cut) leaves the file behind, so they never go into the user's tree when that
can be helped: they go to the workspace's scratch directory ``.coder-es/tmp/`` (``scratch_dir``),
named after the writing process, and ``clean_scratch`` (run when a workspace is opened) removes
those whose process is gone. The rename must stay on one file system to be atomic, so a target
on another file system than the scratch directory (a mount inside the workspace) gets its
temporary file beside it, as before, and the file's path is noted in the scratch directory's
journal first, so the next ``clean_scratch`` removes it too.

A restoration of many files (``coder_es.workspace.restore``) stages each file beside its target
instead: thousands of files created in one directory and renamed across directories cost about
three times the kernel time of the same in the files' own directories (the kernel serialises
cross-directory renames for the whole file system, and one directory growing by thousands of
names is slow to add to). Their names are noted first in one record per batch in the scratch
directory (``note_batch``), which ``clean_scratch`` reads when the batch's process is gone.

Clean-up deletes what these records name, so it obeys only records this user's coder-es sealed
for this workspace (``coder_es.workspace.authentic``, as the transaction journals are), reaches
the scratch directory and every file it removes without following a link, and removes nothing
but temporary files; any other record is left alone and said once in a warning.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import itertools
import logging
import os
import secrets
import stat
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from coder_es.errors import CoderESError
from coder_es.workspace.errors import InvalidPathError

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: the check and rename are merely adjacent
    fcntl = None  # type: ignore[assignment]

LOCK_TIMEOUT_S = 5.0


def _find_syncfs() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        call = libc.syncfs
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int]
    call.restype = ctypes.c_int
    return call


_syncfs = _find_syncfs()


def read_current(path: Path) -> bytes | None:
    """The file's bytes, or None if it does not exist."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None
    except IsADirectoryError as e:
        msg = f"{path} is a directory, not a file"
        raise InvalidPathError(msg) from e


SCRATCH_PARTS = (".coder-es", "tmp")
JOURNAL = "elsewhere"
"""In the scratch directory: temporary files written beside their target (another file system)."""
_TMP_SUFFIX = ".coder-es-tmp"
_BATCH_SUFFIX = ".coder-es-batch"
_RECORD_VERSION = 1
"""Of the sealed records of temporary files (``coder_es.workspace.authentic``)."""
_MAX_RECORD_BYTES = 64 << 20
_SCRATCH_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

log = logging.getLogger(__name__)
_warned: set[str] = set()


def scratch_dir(workspace: Path) -> Path:
    """Where the writes into ``workspace`` keep their temporary files."""
    return workspace.joinpath(*SCRATCH_PARTS)


def _open_scratch(scratch: Path, *, create: bool) -> int | None:
    """A descriptor of the scratch directory (the caller closes it), reached from its workspace
    without following a link at ``.coder-es`` or ``tmp``: a planted link would carry clean-up's
    deletions and the records' writes somewhere else. None when it is absent (and not
    ``create``d) or not a directory of ours."""
    try:
        fd = os.open(scratch.parent.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        for part in SCRATCH_PARTS:
            try:
                sub = os.open(part, _SCRATCH_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o777, dir_fd=fd)
                sub = os.open(part, _SCRATCH_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = sub
    except OSError:
        os.close(fd)
        return None
    return fd


def clean_scratch(workspace: Path) -> int:
    """Remove the temporary files that killed writers left (their process is gone). Cheap when
    there are none: one directory listing. Returns how many were removed.

    Only records this user's coder-es sealed are obeyed (``coder_es.workspace.authentic``), and
    only for this workspace: one found in a cloned repository or written by a sandboxed command
    is left alone, said once in a warning."""
    scratch = _open_scratch(scratch_dir(workspace), create=False)
    if scratch is None:
        return 0
    try:
        names = os.listdir(scratch)
        removed = 0
        for name in names:
            if name.endswith(_TMP_SUFFIX) and _writer_gone(name):
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=scratch)
                    removed += 1
        if JOURNAL in names:
            removed += _clean_journal(workspace, scratch)
        for name in names:
            if name.endswith(_BATCH_SUFFIX) and _writer_gone(name, _BATCH_SUFFIX):
                removed += _clean_batch(workspace, scratch, name)
        return removed
    finally:
        os.close(scratch)


def note_batch(scratch: Path, names: Iterable[str]) -> Path | None:
    """Record, before any of them exists, the temporary files a batch of writes (a restoration)
    stages beside their targets: ``names`` relative to the workspace (absolute for a file
    recorded outside it). One new file in the scratch directory, named after the writing
    process and sealed (``coder_es.workspace.authentic``: clean-up obeys no other), so that a
    kill at any point leaves them findable by ``clean_scratch``; the writer removes it with
    ``forget_batch`` once they are gone. None when there is no usable scratch directory or key
    (the files are then beside their targets unrecorded, as a last resort).

    Not flushed: a kill leaves the page cache, and so this file, intact; a power cut before the
    batch's ``syncfs`` (which flushes it with the staged files) can leave stray temporary files,
    never a changed user file."""
    from coder_es.workspace import authentic

    name = f"{os.getpid()}.{secrets.token_hex(6)}{_BATCH_SUFFIX}"
    workspace = os.path.realpath(scratch.parent.parent)
    content = {"kind": "batch", "workspace": workspace, "record": name, "files": list(names)}
    try:
        data = authentic.seal(content, version=_RECORD_VERSION)
    except OSError:
        return None
    fd_dir = _open_scratch(scratch, create=True)
    if fd_dir is None:
        return None
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(name, flags, 0o600, dir_fd=fd_dir)
    except OSError:
        os.close(fd_dir)
        return None
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=fd_dir)
        return None
    finally:
        os.close(fd)
        os.close(fd_dir)
    return scratch / name


def forget_batch(journal: Path | None) -> None:
    """The batch's temporary files are all gone: its record goes too."""
    if journal is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(journal)


def _warn_once(line: str) -> None:
    """One line per refused record and process (a workspace is opened more than once)."""
    if line not in _warned:
        _warned.add(line)
        log.warning("%s", line)


def _read_record(scratch: int, name: str) -> bytes:
    """A regular file of the scratch directory (a link is not followed)."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=scratch)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        return os.read(fd, _MAX_RECORD_BYTES)
    finally:
        os.close(fd)


def _own(content: dict[str, Any], kind: str, workspace: str, **fields: str) -> None:
    """Refuse an authentic record that belongs elsewhere (another workspace, another name)."""
    from coder_es.workspace.authentic import RecordRefused

    if content.get("kind") != kind or content.get("workspace") != workspace:
        raise RecordRefused("written for another workspace")
    if any(content.get(k) != v for k, v in fields.items()):
        raise RecordRefused("written under another name")


def _clean_batch(workspace: Path, scratch: int, name: str) -> int:
    """Remove the temporary files a killed batch noted (``note_batch``), then its record. Each
    is reached as a restoration reaches files (``confined``: from the workspace's descriptor,
    no link followed, never into ``.coder-es/``), and only a temporary file of the batch's own
    process is ever removed."""
    from coder_es.workspace.authentic import RecordRefused, unseal
    from coder_es.workspace.confined import ConfinedDir

    real = os.path.realpath(workspace)
    try:
        content = unseal(_read_record(scratch, name), version=_RECORD_VERSION)
        _own(content, "batch", real, record=name)
        files = content.get("files")
        if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
            raise RecordRefused("damaged")
    except (OSError, RecordRefused) as e:
        why = (e.strerror or str(e)) if isinstance(e, OSError) else str(e)
        _warn_once(
            f"{scratch_dir(workspace) / name}: a record of temporary files coder-es did not "
            f"write ({why}); left alone, nothing it names was removed"
        )
        return 0
    ours = "." + name.split(".", 1)[0] + "."  # ``temporary_names`` of the batch's process
    removed = 0
    roots: dict[bool, ConfinedDir] = {}
    try:
        for line in files:
            base = os.path.basename(line)
            if not (base.startswith(ours) and base.endswith(_TMP_SUFFIX)):
                continue
            outside = line.startswith("/")
            try:
                root = roots.get(outside)
                if root is None:
                    root = roots[outside] = (
                        ConfinedDir("/", guard=False)
                        if outside
                        # The restoration named them from the workspace's real path.
                        else ConfinedDir(real)
                    )
                dir_fd, last = root.parent(line.lstrip("/"))
                os.unlink(last, dir_fd=dir_fd)
                removed += 1
            except (OSError, CoderESError):
                pass  # never staged (killed first), or already installed: nothing to remove
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=scratch)
    finally:
        for root in roots.values():
            root.close()
    return removed


def _note_elsewhere(scratch: int, workspace: Path, path: str) -> None:
    """Add the temporary file ``path`` (beside its target on another file system) to the
    scratch journal, sealed like a batch's record; OSError when it cannot be."""
    from coder_es.workspace import authentic

    content = {"kind": JOURNAL, "workspace": os.path.realpath(workspace), "path": path}
    line = authentic.seal(content, version=_RECORD_VERSION) + b"\n"
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(JOURNAL, flags, 0o600, dir_fd=scratch)
    try:
        os.write(fd, line)  # one write: appends of several writers never interleave
    finally:
        os.close(fd)


def _clean_journal(workspace: Path, scratch: int) -> int:
    """Remove the temporary files the scratch journal notes whose writer is gone (reached from
    ``/`` without following a link); its lines for live writers, and those refused (left
    alone, said once), stay."""
    from coder_es.workspace.authentic import RecordRefused, unseal
    from coder_es.workspace.confined import ConfinedDir

    real = os.path.realpath(workspace)
    removed = 0
    refused: list[str] = []
    try:
        fd = os.open(
            JOURNAL, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=scratch
        )
    except OSError as e:
        refused.append(e.strerror or str(e))
        fd = -1
    if fd >= 0:
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "not a regular file")
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)
            keep = []
            with ConfinedDir("/", guard=False) as root:
                for line in _read_fd_from(fd, 0).splitlines():
                    try:
                        content = unseal(line, version=_RECORD_VERSION)
                        _own(content, JOURNAL, real)
                        path = content.get("path")
                        if not isinstance(path, str) or not path.endswith(_TMP_SUFFIX):
                            raise RecordRefused("damaged")
                    except RecordRefused as e:
                        refused.append(str(e))
                        keep.append(line)
                        continue
                    if not _writer_gone(os.path.basename(path)):
                        keep.append(line)
                        continue
                    with contextlib.suppress(OSError, CoderESError):
                        dir_fd, last = root.parent(path.lstrip("/"))
                        os.unlink(last, dir_fd=dir_fd)
                        removed += 1
            os.ftruncate(fd, 0)
            os.pwrite(fd, b"".join(k + b"\n" for k in keep), 0)
        except OSError as e:
            refused.append(e.strerror or str(e))
        finally:
            os.close(fd)
    if refused:
        _warn_once(
            f"{scratch_dir(workspace) / JOURNAL}: a record of temporary files coder-es did not "
            f"write ({refused[0]}); left alone, nothing it names was removed"
        )
    return removed


def _writer_gone(name: str, suffix: str = _TMP_SUFFIX) -> bool:
    """Whether the process that named a temporary file ``...<pid>.<token>.coder-es-tmp`` (or a
    batch's record, ``suffix``) is gone."""
    parts = name[: -len(suffix)].rsplit(".", 2)
    pid = parts[-2] if len(parts) >= 2 else ""
    if not pid.isdigit():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # alive, another user's
    return False


SYNC_THREADS = 8


def sync_dirs(paths: Iterable[Path]) -> None:
    """Make renames in these directories durable (one fsync per directory).

    Several directories are synced at once, from threads: a journaling file system commits
    concurrent fsyncs together (ext4: one journal commit for all), where one after the other
    each waits for a commit of its own (10 directories: ~70 ms serial, ~20 ms at once, here)."""
    unique = list(set(paths))
    if len(unique) <= 1:
        for path in unique:
            fsync_dir(path)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(len(unique), SYNC_THREADS)) as pool:
        list(pool.map(fsync_dir, unique))


def _lock(fd: int) -> None:
    if fcntl is None:
        return
    deadline = time.monotonic() + LOCK_TIMEOUT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() > deadline:
                # Someone holds the lock for long: check and write anyway rather than hang.
                return
            time.sleep(0.001)


def sync_filesystem(path: Path) -> bool:
    """Flush every pending write of the file system holding ``path`` (Linux ``syncfs``): one
    flush for a whole batch of staged files instead of one per file. False where the call does
    not exist (the caller then flushes file by file)."""
    if _syncfs is None:
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        if _syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs failed: {os.strerror(err)}", str(path))
    finally:
        os.close(fd)
    return True


def sync_filesystem_of(fd: int) -> bool:
    """``sync_filesystem`` for the file system of an open descriptor."""
    if _syncfs is None:
        return False
    if _syncfs(fd) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"syncfs failed: {os.strerror(err)}")
    return True


def fsync_dir(path: Path) -> None:
    # The rename is only durable once the directory entry is; not every platform allows it.
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# ---------------------------------------------------------------- by directory descriptor
#
# The same protocol for a caller holding its directories open (a restoration, through
# ``coder_es.workspace.confined``): every call names a file relative to its directory's
# descriptor, so nothing is resolved through ``/proc/self/fd`` or a path again, and the
# final name is never followed if it is a link (``O_NOFOLLOW``). A restoration of thousands of
# files spends most of its time in these system calls: each one left out counts (measured in
# bench/rewind.py against ``git checkout``).

_READ_AT = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def read_at(dir_fd: int, name: str) -> tuple[bytes | None, int | None]:
    """The bytes and permission bits of the regular file ``name`` in ``dir_fd`` ((None, None)
    when absent). A link raises ``OSError(ELOOP)``; anything but a regular file (a directory, a
    FIFO: ``O_NONBLOCK`` keeps the open from waiting on one) raises ``InvalidPathError``."""
    try:
        fd = os.open(name, _READ_AT, dir_fd=dir_fd)
    except FileNotFoundError:
        return None, None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            what = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise InvalidPathError(f"{name} is {what}, not a file")
        # Read to an empty read: a short one is not the end everywhere (FUSE).
        first = os.pread(fd, st.st_size + 1, 0)
        return first + _read_fd_from(fd, len(first)), stat.S_IMODE(st.st_mode)
    finally:
        os.close(fd)


def temporary_names() -> Callable[[], str]:
    """A maker of new temporary files' names, one random draw for them all (``clean_scratch``
    knows their writer by the pid in them). Safe to call from several threads."""
    prefix = f"{os.getpid()}.{secrets.token_hex(6)}"
    counter = itertools.count(1)  # next() on it is atomic: no two threads get one number
    return lambda: f"{prefix}{next(counter)}{_TMP_SUFFIX}"


def umask_now() -> int | None:
    """The process's umask, read without changing it (``os.umask`` sets it, for every thread);
    None where it cannot be read (Linux before 4.7, not Linux)."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return None


def stage_at(
    tmp_dir: int, tmp_name: str, data: bytes, mode: int | None, *, umask: int | None = None
) -> None:
    """``stage``, for a caller that chose the temporary file's directory and name (not flushed:
    the caller flushes the batch with ``sync_filesystem``); ``mode``: the current file's.
    ``umask``: the process's (``umask_now``), when known: the file is created with ``mode``
    and changed only when the umask takes some of its bits away (one call less per file)."""
    _stage_at(tmp_dir, tmp_name, data, mode, sync=False, umask=umask)


def _stage_at(
    tmp_dir: int,
    tmp_name: str,
    data: bytes,
    mode: int | None,
    *,
    sync: bool,
    umask: int | None = None,
) -> None:
    create = 0o666 if mode is None else mode
    fd = os.open(
        tmp_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, create, dir_fd=tmp_dir
    )
    try:
        if mode is not None and (umask is None or mode & umask):
            os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name, dir_fd=tmp_dir)
        raise
    os.close(fd)


def install_at(
    dir_fd: int, name: str, tmp_dir: int, tmp_name: str, *, expected: bytes | None
) -> bool:
    """``install``: move the staged file to ``name`` iff it holds ``expected`` (None: absent);
    the staged file is gone afterwards either way."""
    return _install_at(dir_fd, name, tmp_dir, tmp_name, expected, locked=False)


def _link_new(src_dir: int, src_name: str, dir_fd: int, name: str) -> bool:
    """Give the file ``src_name`` the new name ``name``; False if that name exists. link()
    fails where the name exists: creating a file can never overwrite another one."""
    try:
        os.link(src_name, name, src_dir_fd=src_dir, dst_dir_fd=dir_fd, follow_symlinks=False)
    except FileExistsError:
        return False
    return True


def _install_at(
    dir_fd: int, name: str, tmp_dir: int, tmp_name: str, expected: bytes | None, *, locked: bool
) -> bool:
    placed = False
    try:
        if expected is None:
            return _link_new(tmp_dir, tmp_name, dir_fd, name)
        with _locked_if_holds_at(dir_fd, name, expected, locked) as holds:
            if not holds:
                return False
            os.replace(tmp_name, name, src_dir_fd=tmp_dir, dst_dir_fd=dir_fd)
            placed = True
        return True
    finally:
        if not placed:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp_name, dir_fd=tmp_dir)


def remove_at(dir_fd: int, name: str, expected: bytes | None) -> bool:
    """Delete ``name`` iff it holds ``expected`` (None: absent, nothing to do)."""
    return _remove_at(dir_fd, name, expected, locked=False)


def _remove_at(dir_fd: int, name: str, expected: bytes | None, *, locked: bool) -> bool:
    if expected is None:
        try:
            os.lstat(name, dir_fd=dir_fd)
        except FileNotFoundError:
            return True
        return False
    with _locked_if_holds_at(dir_fd, name, expected, locked) as holds:
        if not holds:
            return False
        os.unlink(name, dir_fd=dir_fd)
    return True


def compare_and_swap_at(
    dir_fd: int,
    name: str,
    data: bytes | None,
    *,
    expected: bytes | None,
    locked: bool = False,
    scratch: Path | None = None,
) -> bool:
    """Make ``name`` in ``dir_fd`` hold ``data`` (None: delete it) iff it holds ``expected``
    (None: absent), each step flushed. Returns False, leaving the disk untouched, when the file
    no longer holds ``expected``. ``locked``: the caller holds ``file_lock_at`` (locking again
    would wait on it). ``scratch``: the workspace's scratch directory for the temporary file
    (``scratch_dir``); the file keeps its current mode."""
    if data is None:
        done = _remove_at(dir_fd, name, expected, locked=locked)
    else:
        mode: int | None = None
        with contextlib.suppress(FileNotFoundError):
            mode = stat.S_IMODE(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
        tmp_dir, tmp_name = _temporary_at(dir_fd, name, scratch)
        try:
            _stage_at(tmp_dir, tmp_name, data, mode, sync=True)
            done = _install_at(dir_fd, name, tmp_dir, tmp_name, expected, locked=locked)
        finally:
            if tmp_dir != dir_fd:
                os.close(tmp_dir)
    if done:
        with contextlib.suppress(OSError):
            # The rename is only durable once the directory entry is.
            os.fsync(dir_fd)
    return done


def _temporary_at(dir_fd: int, name: str, scratch: Path | None) -> tuple[int, str]:
    """The directory (a descriptor the caller closes unless it is ``dir_fd``) and name of a
    new temporary file for ``name``: in ``scratch`` when it is on the same file system (the
    rename must be), else beside the file, noted in the scratch journal first."""
    tmp_name = f"{os.getpid()}.{secrets.token_hex(6)}{_TMP_SUFFIX}"
    if scratch is None:
        return dir_fd, f".{name}.{tmp_name}"
    # Empty between writes, it never shows in `git status` (git lists no empty dirs).
    scratch_fd = _open_scratch(scratch, create=True)
    if scratch_fd is None:
        return dir_fd, f".{name}.{tmp_name}"  # no usable scratch directory: beside the file
    if os.fstat(scratch_fd).st_dev == os.fstat(dir_fd).st_dev:
        return scratch_fd, tmp_name
    beside = f".{name}.{tmp_name}"
    try:
        # Noted before it exists, so that a kill at any point leaves it findable.
        where = os.readlink(f"/proc/self/fd/{dir_fd}")
        _note_elsewhere(scratch_fd, scratch.parent.parent, os.path.join(where, beside))
    except OSError:
        pass  # unrecorded, as a last resort (as with no scratch directory)
    finally:
        os.close(scratch_fd)
    return dir_fd, beside


@contextlib.contextmanager
def file_lock_at(dir_fd: int, name: str) -> Iterator[None]:
    """Hold the advisory lock of the file now at ``name`` in ``dir_fd`` (nothing to lock if it
    is absent; a link is not followed)."""
    while True:
        try:
            fd = os.open(name, _READ_AT, dir_fd=dir_fd)
        except (FileNotFoundError, IsADirectoryError):
            yield
            return
        try:
            _lock(fd)
            st = os.fstat(fd)
            try:
                now = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                current = (now.st_ino, now.st_dev) == (st.st_ino, st.st_dev)
            except FileNotFoundError:
                current = False
            if current:
                yield
                return
        finally:
            os.close(fd)  # closing releases the lock
        # Replaced while we waited for the lock: lock the new file instead.


def move_into_place_at(
    dir_fd: int, name: str, src_dir: int, src_name: str, *, expected: bytes | None
) -> bool:
    """Rename the file ``src_name`` in ``src_dir`` (same file system) to ``name`` in ``dir_fd``
    iff it holds ``expected`` (None: absent), without copying its content. False, with the
    source left as it is, when it does not (or the rename crosses file systems: the caller
    writes a copy instead).

    The directory is not fsynced: a caller moving many files syncs each directory once
    (``sync_dirs``)."""
    try:
        if expected is None:
            if not _link_new(src_dir, src_name, dir_fd, name):
                return False
            os.unlink(src_name, dir_fd=src_dir)
            return True
        with _locked_if_holds_at(dir_fd, name, expected, False) as holds:
            if not holds:
                return False
            os.replace(src_name, name, src_dir_fd=src_dir, dst_dir_fd=dir_fd)
        return True
    except OSError as e:
        if e.errno in (errno.EXDEV, errno.EPERM):
            return False
        raise


@contextlib.contextmanager
def _locked_if_holds_at(
    dir_fd: int, name: str, expected: bytes, locked: bool = False
) -> Iterator[bool]:
    """Lock the file ``name`` and yield whether it (still this very file) holds ``expected``.
    A link at ``name`` raises ``OSError(ELOOP)``: it was
    a file when the caller read it, and nothing is written through a link."""
    try:
        fd = os.open(name, _READ_AT, dir_fd=dir_fd)
    except FileNotFoundError:
        yield False
        return
    try:
        if not locked:
            _lock(fd)
        st = os.fstat(fd)
        try:
            now = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            now = None
        yield (
            now is not None
            and (now.st_ino, now.st_dev) == (st.st_ino, st.st_dev)
            and stat.S_ISREG(st.st_mode)
            # A size that differs settles it without reading.
            and st.st_size == len(expected)
            and _read_upto(fd, len(expected) + 1) == expected
        )
    finally:
        os.close(fd)  # closing releases the lock


def _read_upto(fd: int, size: int) -> bytes:
    """The file's first ``size`` bytes or fewer: enough to compare with content of ``size - 1``
    bytes (a short read, where a file system gives one, only makes the comparison fail)."""
    return os.pread(fd, size, 0)


def _read_fd_from(fd: int, offset: int) -> bytes:
    chunks: list[bytes] = []
    while True:
        chunk = os.pread(fd, 1 << 20, offset)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        offset += len(chunk)
