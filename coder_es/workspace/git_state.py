"""The git repository a session started in, recorded so that a live replay can rebuild it.

Shell commands of a recorded session may run git (``git status``, ``git diff``, ``git log``):
their output depends on the repository, not only on the files. At session start the workspace's
repository state is captured (``capture``) into ``Started.settings["git"]``:

- ``head``: the commit checked out, and ``branch``: its branch name (None when detached);
- ``prefix``: where the workspace is inside the repository (``""`` at its top);
- ``repository``: the repository's top directory then (where a replay looks for the commit first);
- ``staged``: a blob with ``git diff --cached --binary`` (None when nothing was staged);
- ``unstaged``: a blob with ``git diff --binary``, the tracked files' changes not staged, in the
  whole repository (a workspace below the top does not hold them all);
- ``deleted``: files of ``head`` missing from the working tree (repository-relative).

The untracked files of the workspace are the cassette's initial files (untracked files outside
the workspace are not recorded). A live replay (``restore``) clones a repository that holds ``head``
(``--repo``, the recorded one, or the current workspace), checks it out on the recorded branch,
stages what was staged and deletes what was deleted; the replay writes the initial files on top.
No repository at hand holds the commit: ``GitStateError`` says which repository and commit a
live replay needs. What is not rebuilt: upstream tracking ("ahead of origin/main") and stashes.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coder_es.errors import UsageError
from coder_es.store.blobs import BlobStore
from coder_es.workspace.safe_git import SafeGit, run_git

SETTINGS_KEY = "git"
_TIMEOUT_S = 60


class GitStateError(UsageError):
    """The recorded repository state cannot be rebuilt here."""


@dataclass(frozen=True)
class GitState:
    head: str
    branch: str | None
    prefix: str
    repository: str
    staged: str | None
    unstaged: str | None
    deleted: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "head": self.head,
            "branch": self.branch,
            "prefix": self.prefix,
            "repository": self.repository,
            "staged": self.staged,
            "unstaged": self.unstaged,
            "deleted": list(self.deleted),
        }

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> GitState | None:
        raw = settings.get(SETTINGS_KEY)
        if not isinstance(raw, dict) or not isinstance(raw.get("head"), str):
            return None
        return cls(
            head=raw["head"],
            branch=raw.get("branch"),
            prefix=str(raw.get("prefix") or ""),
            repository=str(raw.get("repository") or ""),
            staged=raw.get("staged"),
            unstaged=raw.get("unstaged"),
            deleted=tuple(raw.get("deleted") or ()),
        )


def _git(cwd: Path, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    # Outside the sandbox, on a repository the workspace controls: every hook point off.
    return run_git(cwd, *args, stdin=stdin, timeout=_TIMEOUT_S)


def _out(cwd: Path | SafeGit, *args: str) -> str | None:
    try:
        proc = cwd.run(*args, timeout=_TIMEOUT_S) if isinstance(cwd, SafeGit) else _git(cwd, *args)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return os.fsdecode(proc.stdout).strip() if proc.returncode == 0 else None


def capture(root: Path, blobs: BlobStore, git: SafeGit | None = None) -> GitState | None:
    """The repository state of the workspace ``root``, None outside a repository (or no
    commit yet). ``git``: the calls' settings when the caller listed them already."""
    if git is None:
        try:
            git = SafeGit.at(root, timeout=_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired):
            return None
    top = _out(git, "rev-parse", "--show-toplevel")
    head = _out(git, "rev-parse", "--verify", "-q", "HEAD")
    if not top or not head:
        return None
    prefix = _out(git, "rev-parse", "--show-prefix") or ""
    branch = _out(git, "symbolic-ref", "-q", "--short", "HEAD")

    def patch(*args: str) -> str | None:
        try:
            diff = git.run(
                "diff",
                *args,
                "--binary",
                "--no-color",
                "--no-ext-diff",
                "--no-textconv",
                "--ignore-submodules=all",
                "--no-renames",
                timeout=_TIMEOUT_S,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return blobs.put(diff.stdout) if diff.returncode == 0 and diff.stdout.strip() else None

    # In HEAD, not in the working tree (staged deletions included: the checkout brings them back).
    deleted = _out(git, "diff", "--name-only", "-z", "--no-renames", "--diff-filter=D", "HEAD")
    deleted = deleted or ""
    return GitState(
        head=head,
        branch=branch,
        prefix=prefix.rstrip("/"),
        repository=top,
        staged=patch("--cached"),
        unstaged=patch(),
        deleted=tuple(sorted({p for p in deleted.split("\0") if p})),
    )


def _has_commit(repo: Path, commit: str) -> bool:
    return _out(repo, "cat-file", "-e", f"{commit}^{{commit}}") is not None


def find_source(state: GitState, candidates: Iterable[Path | str | None]) -> Path:
    """The first repository among ``candidates`` (then the recorded one) holding the commit."""
    tried: list[str] = []
    for candidate in [*candidates, state.repository]:
        if not candidate:
            continue
        path = Path(candidate)
        if str(path) in tried:
            continue
        tried.append(str(path))
        if path.is_dir() and _has_commit(path, state.head):
            top = _out(path, "rev-parse", "--show-toplevel")
            return Path(top) if top else path
    msg = (
        f"live replay needs repository {state.repository or '(unknown)'} at commit "
        f"{state.head}: the session's shell commands ran git there. None of "
        f"{', '.join(tried) or 'the places looked at'} holds that commit; pass --repo PATH "
        "with a clone that does (git fetch it first)"
    )
    raise GitStateError(msg)


def restore(state: GitState, source: Path, target: Path, blob: Callable[[str], bytes]) -> Path:
    """Clone ``source`` into the empty directory ``target`` as the recorded state; returns the
    workspace directory (``target``/prefix), before the replay writes the initial files."""

    def run(*args: str, cwd: Path = target, stdin: bytes | None = None) -> None:
        try:
            proc = _git(cwd, *args, stdin=stdin)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise GitStateError(f"cannot rebuild the repository at {state.head}: {e}") from e
        if proc.returncode != 0:
            why = os.fsdecode(proc.stderr).strip().splitlines()
            msg = f"cannot rebuild the repository at {state.head}: git {args[0]}: " + (
                why[-1] if why else f"exit {proc.returncode}"
            )
            raise GitStateError(msg)

    target.mkdir(parents=True, exist_ok=True)
    # An absolute path and "--": a recorded "repository" is never read as an option or a URL
    # (only the file protocol is allowed anyway, coder_es.workspace.safe_git).
    source = Path(os.path.abspath(source))
    run("clone", "-q", "--no-checkout", "--", str(source), str(target), cwd=target.parent)
    if state.branch:
        run("checkout", "-q", "-B", state.branch, state.head)
    else:
        run("checkout", "-q", "--detach", state.head)
    # The clone's origin is this machine's path: the recorded session saw its own remotes.
    run("remote", "remove", "origin")
    if state.staged:
        run("apply", "--cached", "--binary", "--", "-", stdin=blob(state.staged))
        run("checkout-index", "-a", "-f")  # the working tree starts from the index
    if state.unstaged:
        run("apply", "--binary", "--", "-", stdin=blob(state.unstaged))
    for rel in state.deleted:
        path = target / rel
        if path.is_file() or path.is_symlink():
            path.unlink()
    return target / state.prefix if state.prefix else target
