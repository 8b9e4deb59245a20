"""coder-es's own git calls, with every point where git would run someone else's program off.

coder-es runs git outside the sandbox (the prompt's ``git status``, the repository state a
session records, a live replay's rebuilt repository). The repository's configuration and its
``.gitattributes`` belong to whoever controls the workspace: a cloned project, or an earlier
agent command (``git config core.fsmonitor 'sh -c ...'`` is an ordinary build-preset command).
Git executes programs named there, so every call goes through ``run_git``, which switches off
each documented hook point (git-config(1), gitattributes(5), githooks(5), git(1) ENVIRONMENT):

- ``core.fsmonitor``: a program git runs on ``status``, ``diff``, ``checkout``... to learn what
  changed. ``false``: git scans the files itself.
- ``core.hooksPath`` and ``.git/hooks/*``: ``checkout`` and ``clone`` run ``post-checkout``;
  ``gc --auto`` runs ``pre-auto-gc``. ``/dev/null`` is a hooks directory with nothing in it.
- ``filter.<driver>.clean`` / ``smudge`` / ``process`` (named by ``.gitattributes`` ``filter=``):
  ``status``, ``diff`` and ``apply`` run the clean filter on working-tree files, ``checkout`` the
  smudge filter. The attributes come from the tree (and ``.git/info/attributes``,
  ``core.attributesFile``), so they cannot be switched off; but a driver only runs when the
  configuration defines it, and settings given on the command line (here through
  ``GIT_CONFIG_COUNT``/``KEY_n``/``VALUE_n``, the same scope as ``-c``) outrank every
  configuration file: each driver the repository's configuration defines (``git config
  --list``, which runs nothing) is given an empty command, which git treats as no filter, and
  ``required=false`` so a required one does not fail the call. When that list cannot be read,
  git is not run (``GitConfigUnreadable``).
- ``diff.<driver>.command`` / ``textconv`` and ``diff.external`` (``GIT_EXTERNAL_DIFF``):
  ``--no-ext-diff --no-textconv`` on every diff, the driver commands emptied as above.
- ``merge.<driver>.driver``: emptied too (no call of ours merges, but an ``apply`` may grow a
  ``--3way`` one day).
- the environment: every ``GIT_*`` variable is dropped (``GIT_DIR``, ``GIT_CONFIG_PARAMETERS``,
  ``GIT_CONFIG_COUNT``/``KEY``/``VALUE``, ``GIT_EXTERNAL_DIFF``, ``GIT_SSH_COMMAND``,
  ``GIT_ASKPASS``, ``GIT_EXEC_PATH``...), and the system and global configuration files are not
  read (``GIT_CONFIG_NOSYSTEM``, ``GIT_CONFIG_GLOBAL=/dev/null``): an earlier command may have
  written ``~/.gitconfig``, and the output of our calls should not depend on the user's taste
  either (it is recorded, and replayed).
- ``core.pager``: ``--no-pager`` (and no terminal: the output is captured).
- transports (``core.sshCommand``, ``core.gitProxy``, ``credential.helper``, ``ext::`` URLs):
  only the ``file`` protocol is allowed, so a recorded "repository" that is really a command line
  (``ext::sh -c ...``) is refused; no credential helper; no terminal prompt.
- submodules: ``status`` and ``diff`` ignore them and ``checkout`` does not recurse: a
  submodule's own configuration is not the one we read, so git is never started in one.
- ``gc.auto`` / ``maintenance.auto``: no background housekeeping (it runs hooks and programs).
- ``core.untrackedCache``: git would write the index's cache; ``GIT_OPTIONAL_LOCKS=0`` likewise
  keeps ``status`` from rewriting the index (our calls only look).

Aliases cannot redefine a built-in command, and includes (``include.path``, ``includeIf``) only
add configuration, which ``git config --list`` shows resolved, so the drivers they define are
emptied too. The other parsers of workspace content (the dependency graph's tree-sitter, the
ignore matcher, TOML and JSON readers) run in-process and execute nothing they read.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

TIMEOUT_S = 60

# Settings given to every call (command-line scope: they outrank every configuration file).
_SAFE_SETTINGS: tuple[tuple[str, str], ...] = (
    ("core.fsmonitor", "false"),
    ("core.hooksPath", os.devnull),
    ("core.untrackedCache", "false"),
    ("core.pager", "cat"),
    ("core.sshCommand", "false"),
    ("core.gitProxy", ""),
    ("core.askPass", ""),
    ("core.alternateRefsCommand", ""),
    ("diff.external", ""),
    ("credential.helper", ""),
    ("protocol.allow", "never"),
    ("protocol.file.allow", "always"),
    ("submodule.recurse", "false"),
    ("diff.ignoreSubmodules", "all"),
    ("status.submoduleSummary", "false"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("log.showSignature", "false"),
)

# Configuration keys that name a program run for files whose attributes pick the driver.
_DRIVER_KEY = re.compile(
    r"^(filter\.(?P<f>.+)\.(clean|smudge|process|required)"
    r"|diff\.(?P<d>.+)\.(command|textconv)"
    r"|merge\.(?P<m>.+)\.driver)$",
    re.IGNORECASE,
)

_OUR_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_ATTR_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_OPTIONAL_LOCKS": "0",
    "GIT_PROTOCOL_FROM_USER": "0",
    "LC_ALL": "C",
}
ARGV: tuple[str, ...] = ("git", "--no-pager")


class GitConfigUnreadable(OSError):
    """The repository's configuration could not be listed: git is not run (its drivers could
    not be switched off)."""


def _with_settings(env: Mapping[str, str], settings: Sequence[tuple[str, str]]) -> dict[str, str]:
    # GIT_CONFIG_COUNT/KEY_n/VALUE_n (git >= 2.31) rather than ``-c key=value``: ``-c`` splits
    # at the first "=", and a driver's name may hold one (``[filter "a=b"]``).
    out = dict(env)
    out["GIT_CONFIG_COUNT"] = str(len(settings))
    for i, (key, value) in enumerate(settings):
        out[f"GIT_CONFIG_KEY_{i}"] = key
        out[f"GIT_CONFIG_VALUE_{i}"] = value
    return out


def git_environ(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of coder-es's git calls before the drivers are known: ``environ``
    without any ``GIT_*`` variable (nor ``SSH_ASKPASS``), plus ours and the fixed settings."""
    env = os.environ if environ is None else environ
    kept = {k: v for k, v in env.items() if not k.upper().startswith("GIT_")}
    kept.pop("SSH_ASKPASS", None)
    return _with_settings({**kept, **_OUR_ENV}, _SAFE_SETTINGS)


def _driver_settings(cwd: Path, env: Mapping[str, str], timeout: float) -> list[tuple[str, str]]:
    """Settings emptying every filter, diff and merge driver the configuration of the
    repository at ``cwd`` defines (none outside a repository). Raises GitConfigUnreadable
    when the configuration cannot be listed."""
    try:
        proc = subprocess.run(
            [*ARGV, "config", "--null", "--list"],
            cwd=cwd,
            capture_output=True,
            timeout=timeout,
            check=False,
            env=dict(env),
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as e:
        raise GitConfigUnreadable(f"git config --list timed out in {cwd}") from e
    if proc.returncode != 0:
        why = os.fsdecode(proc.stderr).strip().splitlines()
        raise GitConfigUnreadable(f"git config --list failed in {cwd}: {why[-1] if why else ''}")
    out: dict[str, str] = {}
    for entry in proc.stdout.split(b"\0"):
        key = os.fsdecode(entry.split(b"\n", 1)[0])
        m = _DRIVER_KEY.match(key)
        if m is None:
            continue
        # An empty command is no driver (git skips it); a required filter without one would
        # fail the call instead of running nothing, hence required=false.
        out[key] = "false" if key.lower().endswith(".required") else ""
        if m.group("f") is not None:
            out[f"filter.{m.group('f')}.required"] = "false"
    return list(out.items())


@dataclass(frozen=True)
class SafeGit:
    """git calls in one repository with every hook point off: its drivers are listed once
    (``at``), for a series of calls made together (a session start's status and recorded
    state), rather than before each call (a git process each)."""

    cwd: Path
    env: Mapping[str, str]

    @classmethod
    def at(
        cls, cwd: Path, environ: Mapping[str, str] | None = None, timeout: float = TIMEOUT_S
    ) -> SafeGit:
        """Raises OSError (no git, GitConfigUnreadable) or subprocess.TimeoutExpired."""
        env = git_environ(environ)
        drivers = _driver_settings(cwd, env, timeout)
        return cls(cwd, _with_settings(env, (*_SAFE_SETTINGS, *drivers)))

    def run(
        self,
        *args: str,
        cwd: Path | None = None,
        stdin: bytes | None = None,
        timeout: float = TIMEOUT_S,
    ) -> subprocess.CompletedProcess[bytes]:
        """``git ARGS`` (in ``cwd``, by default the repository's), output captured. Another
        ``cwd`` must not be another repository: its drivers were not listed."""
        return subprocess.run(
            [*ARGV, *args],
            cwd=cwd or self.cwd,
            input=stdin,
            capture_output=True,
            timeout=timeout,
            check=False,
            env=dict(self.env),
            stdin=subprocess.DEVNULL if stdin is None else None,
        )


def run_git(
    cwd: Path,
    *args: str,
    stdin: bytes | None = None,
    timeout: float = TIMEOUT_S,
    environ: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """``git ARGS`` in ``cwd``, output captured, with every hook point off (see the module).
    Raises OSError (no git, GitConfigUnreadable) or subprocess.TimeoutExpired like
    ``subprocess.run``."""
    return SafeGit.at(cwd, environ, timeout).run(*args, stdin=stdin, timeout=timeout)
