"""The light parts of the ACP harness, imported by every turn (``acp`` itself, with the ACP
schema, is imported only when the harness is an ACP agent): how the agent's stdin crosses the
sandbox, and how its permission questions are answered."""

from __future__ import annotations

import fcntl
import os
import shutil
from dataclasses import dataclass

WRITE_KINDS = frozenset({"edit", "delete", "move", "execute"})
STDIN_FD_MIN = 10
# The command inside the sandbox: its stdin comes back from the descriptor it was handed (the
# sandbox's PID 1 gives the command /dev/null as stdin).
STDIN_SHIM = 'fd=$1; shift; eval "exec 0<&$fd $fd<&-"; exec "$@"'


@dataclass
class PermissionRule:
    """How a ``request_permission`` is answered (our rules, for this turn)."""

    read_only: bool
    yes: bool

    def decide(self, kind: str | None, title: str) -> tuple[bool, str, str]:
        """(allowed, decided_by, reason)."""
        if self.read_only and (kind or "other") in WRITE_KINDS | {"other"}:
            return (
                False,
                "rule",
                f"the agent preset is read-only: {kind or 'this call'} is not allowed",
            )
        if self.yes:
            return True, "user", "allowed once (--yes)"
        if kind in ("read", "search", "think", "fetch"):
            return True, "rule", "reads are allowed"
        return (
            False,
            "client",
            f"{title or kind} needs permission and this run is non-interactive; rerun with --yes",
        )


def stdin_descriptor() -> tuple[int, int]:
    """A pipe for the agent's stdin: (read end, numbered >= 10 so no fd the sandbox's PID 1
    moves can clash with it; write end)."""
    r, w = os.pipe()
    high = fcntl.fcntl(r, fcntl.F_DUPFD, STDIN_FD_MIN)
    os.close(r)
    return high, w


def shimmed(command: list[str], fd: int) -> list[str]:
    # bash: dash redirects only descriptors 0-9.
    shell = shutil.which("bash") or "/bin/sh"
    return [shell, "-c", STDIN_SHIM, "coder-es-acp", str(fd), *command]
