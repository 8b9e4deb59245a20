"""Running one shell command in its own user, mount and PID namespaces (Linux).

The util-linux ``unshare`` binary creates the namespaces; a small POSIX ``sh`` script (``INIT``)
runs as PID 1 in the new PID namespace and sets the mounts up before starting the command:

- a fresh ``/proc`` (mounted by ``unshare --mount-proc``: the command sees only its own
  processes, and no ``/proc/<pid>/cwd`` of a process outside leads to the real workspace);
- an allow-list of writable places, in every mode: every mount is remounted read-only except
  the workspace's overlay (write mode) and the writable places named by the configuration (each
  bound onto itself first, so that it is a mount of its own the remount skips); ``/tmp`` and
  ``/dev/shm`` are private tmpfs. A write anywhere else fails in the kernel whatever the command
  line looks like (``EROFS``), so nothing outside the workspace needs recording or rewinding;
- write mode: an overlay mounted over the workspace path itself (lower = the workspace, upper =
  a directory of this transaction, whose file system the overlay keeps writable through its own
  private clone of the mount), so the command sees the usual paths and every write it makes
  lands in the upper directory;
- read-only mode: the workspace is read-only like the rest;
- what lives under ``/tmp`` (a workspace, a writable place) is moved over the private ``/tmp``;
- the store directory and the user's protected directories covered by an empty read-only tmpfs
  in every mode;
- optionally a new network namespace (only loopback, brought up).

The command itself then runs in a *nested* user and mount namespace: mounts inherited from a
namespace owned by another user namespace are locked by the kernel, so the command (root in its
own namespace) can neither unmount the tmpfs that hides the store nor remount anything
read-write.

When the command's shell exits, PID 1 lists the processes still running (background jobs,
daemons), writes them to the report pipe, kills them and exits; the kernel kills whatever is left
when PID 1 dies. ``--kill-child`` (unshare) and ``setpriv --pdeathsig`` (coder-es' own child)
make the namespace die with coder-es, even on ``kill -9``.

The report is a pipe (its write end is PID 1's stdin, moved to fd 3 and closed for the command,
whose stdin is ``/dev/null``; a file would keep the file system busy for a read-only remount)
with one line per fact:
``setup <step>`` (the sandbox could not be set up: exit status ``SETUP_FAILED``) and
``ready`` (the command is about to start: without it, the command never ran) and
``left <pid> <command line>`` (a process the command left running).

A command run by another process (an editor's terminal, ``coder_es.tools.terminal``) cannot be
handed a pipe: its report comes through a FIFO of the transaction instead (``ReportFifo``), opened
for writing by the terminal's wrapper before the namespaces are made. A FIFO is a special file: an
open write end does not make a mount busy for the read-only remount.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import select
import shutil
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

SETUP_FAILED = 125

# PID 1 of the command's namespace (stdin: the report pipe; /proc is mounted by unshare).
# Arguments: cwd, net (0|1: 0 = a new network namespace), two fstabs of the transaction (the
# mounts made first: writable places bound onto themselves, the workspace's overlay, a scratch
# tmpfs on /dev/shm for this script; the mounts made last: what lives under /tmp carried over the
# private /tmp (bound aside, /tmp mounted, bound back), the private /dev/shm over the scratch one,
# the hidden paths), the mount points that stay writable (escaped as in mountinfo, separated by
# spaces), "--", and the command's argv. A process costs more than the mounts it makes (a mount(8)
# run is ~10 ms): all is done by two mount -a runs, and mountinfo is read by the shell itself.
INIT = r"""
set -uf
cwd=$1 net=$2 first=$3 last=$4 keep=$5
shift 6
exec 3>&0 0</dev/null
fail() { echo "setup $1" >&3; exit 125; }
mount -n -a -T "$first" || fail mounts
# Every other mount read-only: the allow-list of writable places is what "keep" names. mountinfo
# and fstab escape names alike (\040). A mount keeps its other flags (nosuid, nodev...: a flag
# locked by the namespace's owner cannot be cleared). /proc stays (the nested namespace writes
# its uid_map there); /dev/shm is the scratch tmpfs, covered at the end.
all=/dev/shm/mounts root=
while read -r _ _ _ _ m o _; do
  case "$m" in /proc | /proc/* | /dev/shm) continue ;; esac
  for k in $keep; do
    [ "$k" = / ] && continue 2
    case "$m" in "$k" | "$k"/*) continue 2 ;; esac
  done
  [ "$m" = / ] && root=remount,bind,ro${o#r[ow]} m=//
  printf 'none %s none remount,bind,ro%s 0 0\n' "$m" "${o#r[ow]}"
done < /proc/self/mountinfo > "$all" || fail "read-only plan"
while IFS= read -r line; do printf '%s\n' "$line"; done < "$last" >> "$all" || fail mounts
mount -n -a -T "$all" 2>/dev/shm/err || { read -r why < /dev/shm/err; fail "mounts: $why"; }
# mount -a skips a line for "/" (written "//" above, which it takes): checked, and done on its own
# where a version of mount skipped it anyway.
if [ -n "$root" ] && [ -w / ]; then
  why=$(mount -n -o "$root" / 2>&1) || fail "read-only /: $(echo $why)"
fi
if [ "$net" = 0 ] && command -v ip >/dev/null 2>&1; then ip link set lo up 2>/dev/null; fi
cd "$cwd" || fail cwd
echo ready >&3
unshare --user --map-root-user --mount -- "$@" 3>&- &
wait $!
status=$?
set +f
for d in /proc/[0-9]*; do
  p=${d#/proc/}
  [ "$p" = 1 ] && continue
  c=$(tr '\0' ' ' < "$d/cmdline" 2>/dev/null)
  [ -n "$c" ] && echo "left $p $c" >&3
done
kill -9 -1 2>/dev/null
exit $status
"""


@dataclass(frozen=True)
class SandboxSpec:
    """Where and how one command runs."""

    workspace: Path
    cwd: Path
    upper: Path | None  # None: read-only mode (no overlay)
    work: Path | None
    fstab: Path  # where to write the mounts (a file of the transaction; siblings are made too)
    hidden: tuple[Path, ...] = ()
    network: bool = True
    writable: tuple[Path, ...] = ()
    """Places outside the workspace the command may change in place (a cache such as
    ``~/.cache/pip``): not a transaction, neither recorded nor rewound. Whatever is not here,
    the workspace (its overlay) or the private ``/tmp``, is read-only."""
    readable: tuple[Path, ...] = ()
    """Directories the command must be able to read although they lie under ``/tmp``, which the
    sandbox replaces with a private one (a harness's own program, installed there): carried over
    it read-only, like the workspace's repository. Elsewhere everything is readable anyway."""
    shared_plans: bool = False
    """``fstab`` is a directory where the mount plans are kept by their content and reused (a
    read-only command has no transaction directory: creating and removing one costs more than
    the command on a busy disk)."""

    @property
    def read_only(self) -> bool:
        return self.upper is None


@dataclass(frozen=True)
class Report:
    """What PID 1 reported: a failed setup step, and the processes the command left running."""

    ready: bool
    setup_failure: str | None
    leftovers: tuple[str, ...]


def tools_missing() -> str | None:
    """Why the namespace sandbox cannot run here (a missing program), or None."""
    for program in ("unshare", "setpriv", "mount", "awk", "tr"):
        if shutil.which(program) is None:
            return f"the {program} program is not installed"
    return None


def unsupported(path: Path) -> str | None:
    """Why the overlay cannot be mounted at ``path`` (overlayfs options split on , and :)."""
    if "," in str(path) or ":" in str(path):
        return f"the path {path} holds a ',' or ':', which overlayfs options cannot carry"
    return None


def wrap(spec: SandboxSpec, argv: Sequence[str]) -> list[str]:
    """The argv that runs ``argv`` inside the sandbox described by ``spec`` (writes its fstab)."""
    outer = [
        "setpriv",
        "--pdeathsig",
        "KILL",
        "unshare",
        "--user",
        "--map-root-user",
        "--mount",
        "--pid",
        "--fork",
        "--kill-child",
        "--mount-proc",
    ]
    if not spec.network:
        outer.append("--net")
    first, last, kept = _mount_files(spec)
    first_path, last_path = _write_plans(spec, "".join(first), "".join(last))
    return [
        *outer,
        "--",
        "/bin/sh",
        "-c",
        INIT,
        "coder-es-sandbox",
        str(spec.cwd),
        "1" if spec.network else "0",
        str(first_path),
        str(last_path),
        " ".join(_escape(p) for p in kept),
        "--",
        *argv,
    ]


def _write_plans(spec: SandboxSpec, first: str, last: str) -> tuple[Path, Path]:
    if not spec.shared_plans:
        paths = (spec.fstab.with_suffix(".first"), spec.fstab)
        for path, text in zip(paths, (first, last), strict=True):
            path.write_text(text, encoding="utf-8", errors="surrogateescape")
        return paths
    key = hashlib.sha256(f"{first}\0{last}".encode("utf-8", "surrogateescape")).hexdigest()[:32]
    out = []
    for suffix, text in (("first", first), ("fstab", last)):
        path = spec.fstab / f"plan-{key}.{suffix}"
        data = text.encode("utf-8", "surrogateescape")
        # A plan found there is used only if it holds exactly these bytes (read without
        # following a link): the name alone proves nothing, anyone who can write the directory
        # could have planted it, and `mount -a` would then mount what they chose.
        if _read_nofollow(path) != data:
            # Written whole under a private name, then renamed over whatever was there (a link
            # is replaced, not followed): a concurrent command reads no file or the whole one.
            tmp = spec.fstab / f".plan-{key}.{suffix}.{os.getpid()}.{threading.get_ident()}"
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()  # a leftover of a process that died here with the same ids
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        out.append(path)
    return out[0], out[1]


def _read_nofollow(path: Path) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        return os.read(fd, 1 << 20)
    finally:
        os.close(fd)


TMP = Path("/tmp")


def refused_place(real: Path, workspace: Path) -> str | None:
    """Why the writable place ``real`` (a real path) gets no mount of its own, or None."""
    if "\n" in str(real) or "\\" in str(real):
        return "its name holds a newline or a backslash, which the mount plan cannot carry"
    if _contains(workspace, real):
        return "it is in the workspace, which commands change through its overlay only"
    if not real.exists():
        return "it does not exist"
    if not real.is_dir():
        return "it is not a directory"
    return None


def writable_places(writable: Sequence[Path], workspace: Path) -> tuple[Path, ...]:
    """The writable places that get a mount of their own: real paths, parents first, none that
    ``refused_place`` refuses (a place inside the workspace would let a write skip the
    transaction)."""
    found: list[Path] = []
    for place in writable:
        real = Path(os.path.realpath(place))
        if refused_place(real, workspace) is None and real not in found:
            found.append(real)
    return tuple(sorted(found, key=lambda p: len(p.parts)))


def _mount_files(spec: SandboxSpec) -> tuple[list[str], list[str], list[Path]]:
    """The first mounts (writable places, the overlay, the scratch /dev/shm), the last mounts
    (what is carried over /tmp, /tmp, /dev/shm, the hidden paths), the mounts kept writable."""
    first: list[str] = []
    writable = writable_places(spec.writable, spec.workspace)
    for place in writable:
        first.append(f"{_escape(place)} {_escape(place)} none rbind 0 0\n")
    kept = list(writable)
    if spec.upper is not None and spec.work is not None:
        # volatile: the upper layer is never synced (copy-ups would fsync every file); after a
        # crash an unfinished transaction is dropped anyway.
        layers = f"lowerdir={spec.workspace},upperdir={spec.upper},workdir={spec.work}"
        options = f"{layers},userxattr,volatile"
        first.append(f"overlay {_escape(spec.workspace)} overlay {_escape(options)} 0 0\n")
        kept.append(spec.workspace)
    # A workspace under /tmp is carried over the private /tmp with the repository it is part of
    # (a monorepo's subdirectory: git needs the .git above it), read-only around the workspace.
    top = _enclosing_repository(spec.workspace)
    own_mount = top != spec.workspace or spec.upper is None  # else the overlay is the mount
    if own_mount and _contains(TMP, top) and not any(_contains(p, top) for p in writable):
        # A mount of its own to carry (made after the overlay: it takes the overlay along).
        first.append(f"{_escape(top)} {_escape(top)} none rbind 0 0\n")
    readable = [
        real
        for real in (Path(os.path.realpath(p)) for p in spec.readable)
        if _contains(TMP, real) and "\n" not in str(real) and real.is_dir()
    ]
    candidates = [*writable, top, *readable]
    first.append("scratch /dev/shm tmpfs mode=700 0 0\n")
    # What lives under /tmp is carried over the private /tmp, outermost mounts only (the mounts
    # below come along): bound aside into the scratch tmpfs after the read-only remount (a bind
    # keeps the flags of what it copies), bound back once /tmp is mounted.
    carried = [
        path
        for path in candidates
        if path != TMP
        and _contains(TMP, path)
        and not any(o != path and _contains(o, path) for o in candidates)
    ]
    aside = [(_escape(p), f"/dev/shm/.carried/{n}") for n, p in enumerate(carried)]
    last = [f"{p} {a} none rbind,X-mount.mkdir 0 0\n" for p, a in aside]
    last.append("tmp /tmp tmpfs mode=1777 0 0\n")
    last += [f"{a} {p} none rbind,X-mount.mkdir 0 0\n" for p, a in aside]
    last.append("shm /dev/shm tmpfs mode=1777 0 0\n")
    for path in spec.hidden:
        if _contains(path, spec.workspace):
            continue  # hiding a directory that holds the workspace would hide the workspace
        if path.is_dir():
            last.append(f"hidden {_escape(path)} tmpfs ro,size=4k,mode=755,X-mount.mkdir 0 0\n")
        elif path.exists():
            last.append(f"/dev/null {_escape(path)} none bind,ro 0 0\n")
    return first, last, kept


def _escape(value: object) -> str:
    text = str(value)
    for raw, escaped in (("\\", "\\134"), (" ", "\\040"), ("\t", "\\011"), ("\n", "\\012")):
        text = text.replace(raw, escaped)
    return text


def read_report(fd: int) -> Report:
    """Read the report pipe to its end (PID 1 exits) and close it."""
    chunks = []
    try:
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return parse_report(b"".join(chunks))


@dataclass
class ReportFifo:
    """The report channel of a command that another process starts: a FIFO at ``path``.

    The read end is open before the command starts, and so is a write end of our own: the reader
    never sees an end of file before the command's PID 1 has opened its end (``open`` would
    otherwise block, or a non-blocking read would end at once), and ``finished`` drops it once
    the command is known to be over. ``read`` (in a thread) then reads to the end, or gives up
    ``grace_s`` after ``finished`` should a process the client failed to kill hold the FIFO.
    """

    path: Path
    grace_s: float = 10.0
    _read_fd: int = -1
    _own_writer: int = -1
    _done_at: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def create(cls, path: Path) -> ReportFifo:
        os.mkfifo(path, 0o600)
        fifo = cls(path)
        fifo._read_fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        fifo._own_writer = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        return fifo

    def finished(self) -> None:
        """The command ended (or will never start): the reader may reach the end."""
        with self._lock:
            if self._own_writer >= 0:
                os.close(self._own_writer)
                self._own_writer = -1
                self._done_at = time.monotonic()

    def read(self) -> Report:
        chunks = []
        try:
            while True:
                ready, _, _ = select.select([self._read_fd], [], [], 0.2)
                if ready:
                    try:
                        chunk = os.read(self._read_fd, 65536)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        break
                    chunks.append(chunk)
                elif self._done_at is not None and time.monotonic() - self._done_at > self.grace_s:
                    break
        finally:
            os.close(self._read_fd)
            self.finished()
        return parse_report(b"".join(chunks))


def parse_report(data: bytes) -> Report:
    raw = data.decode("utf-8", "replace")
    ready = False
    setup = None
    left: list[str] = []
    for line in raw.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "ready":
            ready = True
        elif kind == "setup":
            setup = rest
        elif kind == "left":
            left.append(rest.strip())
    return Report(ready, setup, tuple(left))


def _enclosing_repository(workspace: Path) -> Path:
    """The nearest directory at or above a workspace under /tmp holding a ``.git``, below /tmp;
    the workspace itself when there is none (or it is not under /tmp)."""
    path = workspace
    while path != TMP and _contains(TMP, path):
        if os.path.lexists(path / ".git"):
            return path
        path = path.parent
    return workspace


def _contains(outer: Path, inner: Path) -> bool:
    return outer == inner or outer in inner.parents
