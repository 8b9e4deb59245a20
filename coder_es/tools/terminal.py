"""Shell commands in a terminal of the user's editor (ACP ``terminal/*``), so the user watches them.

The terminal is another process's: it is given a command line, a working directory and a few
environment variables, and answers with the output it kept and the exit status. ``bash`` hands it
exactly the command line it would run itself (the sandbox's ``unshare`` wrapper with the
transaction's overlay, or the plain shell in the fallback), so what a command may change and how
its changes are found is the same wherever it runs.

``WRAPPER`` stands between the terminal and that command line, for what a client cannot be
trusted to do the same way as ``bash`` does locally:

- the command gets its own session (``setsid``), and a kill of the terminal (SIGHUP, SIGINT or
  SIGTERM, as the client chooses) becomes a SIGKILL of the command's whole process group, as a
  local timeout does: background jobs die too, and ``unshare --fork`` (which blocks SIGTERM
  while its namespace runs) is never what the client signals;
- the sandbox's report channel: its PID 1 reads nothing and writes its report to its stdin,
  here the transaction's FIFO (``coder_es.sandbox.namespaces.ReportFifo``);
- ``setpriv --pdeathsig`` in the sandbox's command line names its parent: this script, not
  whichever thread of the client spawned the terminal.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

# $1: the report FIFO ("" for none), then the command's argv.
WRAPPER = r"""
report=$1
shift
if command -v setsid >/dev/null 2>&1; then set -- setsid "$@"; fi
if [ -n "$report" ]; then "$@" 0>"$report" & else "$@" </dev/null & fi
child=$!
trap 'kill -KILL -"$child" 2>/dev/null; kill -KILL "$child" 2>/dev/null' HUP INT TERM
while :; do
  wait "$child" 2>/dev/null  # (dash reports a killed job on stderr: "Killed")
  status=$?
  kill -0 "$child" 2>/dev/null || break
done
exit "$status"
"""


SCRIPT_NAME = "coder-es-run"


def terminal_command(
    argv: Sequence[str], report: Path | None, script_dir: Path
) -> tuple[str, list[str]]:
    """(command, args) that run ``argv`` under ``WRAPPER``: a small script written into
    ``script_dir`` (private to this call) holding the wrapper and the sandbox's command line,
    whose one argument is ``argv``'s last, the model's command. So the client shows (and asks
    about) ``coder-es-run "<the command>"`` instead of 2 KB of wrapper."""
    fixed = " ".join(shlex.quote(a) for a in (str(report or ""), *argv[:-1]))
    script = script_dir / SCRIPT_NAME
    script.write_text(
        "#!/bin/sh\n# coder-es: runs its argument, the agent's command, as coder-es would\n"
        f'set -- {fixed} "$1"\n{WRAPPER}'
    )
    script.chmod(0o700)
    return str(script), [argv[-1]]


@dataclass(frozen=True)
class TerminalRun:
    """What the terminal reported once its command ended (or was killed)."""

    terminal_id: str
    output: str
    truncated: bool
    """The terminal dropped the beginning of the output (beyond the byte limit)."""
    exit_code: int | None
    signal: str | None
    timed_out: bool


class Terminal(Protocol):
    """A terminal that runs one command to its end where the user sees it.

    ``run`` kills the command at ``timeout_ms`` (``timed_out``); cancelled, it kills it and
    releases the terminal before the cancellation goes on.
    """

    async def run(
        self,
        command: str,
        args: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        timeout_ms: int,
        output_limit: int,
    ) -> TerminalRun: ...
