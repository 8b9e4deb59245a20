"""Transaction journals that only this user's coder-es can have written.

Recovery finishes a journal outside any sandbox, so a journal is a list of orders: write, delete,
chmod, link. A repository, a cassette or another user can put a file named ``journal.json``
under ``.coder-es/tx/``; such a file must never be obeyed. Each journal is therefore sealed
(``coder_es.workspace.authentic``: an HMAC under this user's key), over a body that names the
transaction and the workspace it belongs to: a journal copied to another transaction or another
workspace does not open either.

What an authentic journal may order is still checked where it is applied: steps only inside the
workspace (``coder_es.workspace.confined``), sources only in that transaction's upper directory.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from coder_es.workspace import authentic
from coder_es.workspace.authentic import RecordRefused

VERSION = 2
OPS = frozenset({"file", "delete", "unlink", "rmdir", "mkdir", "symlink"})
MAX_JOURNAL_BYTES = 256 << 20


def seal(steps: list[dict[str, Any]], notes: list[str], *, tx: str, workspace: Path) -> bytes:
    """The journal file's bytes for these steps of transaction ``tx`` in ``workspace``."""
    content = {"tx": tx, "workspace": os.fsdecode(workspace), "steps": steps, "notes": notes}
    return authentic.seal(content, version=VERSION)


def unseal(data: bytes, *, tx: str, workspace: Path) -> list[dict[str, Any]]:
    """The steps of an authentic journal of ``tx`` in ``workspace``; ``RecordRefused`` else."""
    content = authentic.unseal(data, version=VERSION)
    try:
        steps = content["steps"]
        belongs = content["tx"] == tx and content["workspace"] == os.fsdecode(workspace)
    except KeyError:
        raise RecordRefused("damaged") from None
    if not belongs:
        raise RecordRefused("written for another transaction or workspace")
    if not isinstance(steps, list) or not all(_step_shape(s) for s in steps):
        raise RecordRefused("damaged steps")
    return steps


def _step_shape(step: Any) -> bool:
    return (
        isinstance(step, dict)
        and step.get("op") in OPS
        and isinstance(step.get("path"), str)
        and (step["op"] != "file" or isinstance(step.get("source"), str))
    )
