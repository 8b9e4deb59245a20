"""The light parts of the ACP harness, imported by every turn (``acp`` itself, with the ACP
schema, is imported only when the harness is an ACP agent): how the agent's stdin crosses the
sandbox, and how its permission questions are answered."""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

WRITE_KINDS = frozenset({"edit", "delete", "move", "execute"})
STDIN_FD_MIN = 10
# The command inside the sandbox: its stdin comes back from the descriptor it was handed (the
# sandbox's PID 1 gives the command /dev/null as stdin).
STDIN_SHIM = 'fd=$1; shift; eval "exec 0<&$fd $fd<&-"; exec "$@"'


# An ACP tool kind as our tool whose rules decide it ("other" and "fetch": asked).
KIND_TOOLS = {
    "execute": "bash",
    "edit": "edit",
    "delete": "write",
    "move": "write",
    "read": "read",
    "search": "grep",
}


@dataclass(frozen=True)
class PermissionRule:
    """How a ``request_permission`` is answered: our rules and preset first (the user's
    ``--allow``/``--deny`` and config rules, the agent preset), then ``--yes`` for what they
    would ask; a non-interactive run rejects the rest, saying why."""

    read_only: bool
    yes: bool
    agent: str = "build"
    rules: tuple[Any, ...] = ()  # coder_es.permissions.rules.Rule
    default: str = "ask"

    def decide(
        self, kind: str | None, title: str, raw_input: Any, paths: list[str], root: Path
    ) -> tuple[bool, str, str, str]:
        """(allowed, decided_by, reason, the rule's tool)."""
        from coder_es.permissions.policy import Policy
        from coder_es.tools.paths import command_subject, path_subject

        tool = KIND_TOOLS.get(kind or "")
        if tool is None:
            if self.read_only:
                return False, "rule", f"the {self.agent} agent is read-only", kind or "other"
            if self.yes:
                return True, "user", "allowed once (--yes)", kind or "other"
            return (
                False,
                "client",
                f"{title or kind} needs permission ({_NON_INTERACTIVE})",
                "other",
            )
        raw = raw_input if isinstance(raw_input, dict) else {}
        if tool == "bash":
            command = raw.get("command") or title
            if isinstance(command, list):
                command = " ".join(str(c) for c in command)
            subject = command_subject(str(command), root)
        else:
            subject = path_subject(paths[0] if paths else str(raw.get("file_path") or title), root)
        found = Policy.for_agent(self.agent, self.rules, self.default).evaluate(tool, subject)
        if found.action == "allow":
            return True, "rule", found.reason, tool
        if found.action == "deny":
            return False, "rule", found.reason, tool
        if self.read_only and kind in WRITE_KINDS:
            return False, "rule", f"the {self.agent} agent is read-only", tool
        if self.yes:
            return True, "user", "allowed once (--yes)", tool
        return False, "client", f"{found.reason} ({_NON_INTERACTIVE})", tool


_NON_INTERACTIVE = "this run is non-interactive; rerun with --yes or --allow"

ASKED_BY = "client"
"""``decided_by`` of a question no rule settled: the one an interactive run asks its user."""

Asker = Callable[[str, str, str, dict[str, Any], str], Awaitable[tuple[bool, str]]]
"""An interactive run's way to ask its user: (call id, our tool, subject, input, why asked) ->
(allowed, reason). Where there is one (``chat --harness``), a question no rule settles is asked
instead of rejected."""


async def settle(
    rule: PermissionRule,
    ask: Asker | None,
    call: str,
    kind: str | None,
    title: str,
    raw_input: Any,
    paths: list[str],
    root: Path,
) -> tuple[bool, str, str, str]:
    """``rule.decide``, and the user's answer where no rule settled it and someone can ask."""
    allowed, by, reason, tool = rule.decide(kind, title, raw_input, paths, root)
    if by != ASKED_BY or ask is None:
        return allowed, by, reason, tool
    why = reason.removesuffix(f" ({_NON_INTERACTIVE})")
    raw = raw_input if isinstance(raw_input, dict) else {}
    allowed, reason = await ask(call, tool, title, raw, why)
    return allowed, "user", reason, tool


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
