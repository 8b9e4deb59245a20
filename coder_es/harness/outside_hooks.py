"""Hooks of a session that has no agent loop of ours: a harness session (``coder_es.harness``).

A harness runs its own loop, tools and files; coder-es sees its prompt before the turn, the
turn's recorded result after it, and the permission questions it answers in between. The hooks
of those events run here with the same pipeline (``run_event``: configuration order, rewrites
chained, decisions combined) and the same sandbox (``run_hook``: a transaction on the workspace,
read-only presets read-only), and each run is returned as an op that records its ``HookRan``.
The harness's changes are its turn's transaction until the turn ends, so hooks run before the
turn (the workspace as the user left it) or after it (the turn's changes applied), never while
it runs. ``docs/harness.md`` lists which events a harness session offers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coder_es.agent import updates as up
from coder_es.domain.session import Session
from coder_es.hooks.answer import Ran
from coder_es.hooks.command import run_hook
from coder_es.hooks.pipeline import EventInput, Outcome, run_event
from coder_es.hooks.spec import HookSpec, hooks_for
from coder_es.sandbox import SandboxSettings
from coder_es.store.blobs import BlobStore
from coder_es.tools.base import ToolContext
from coder_es.workspace.workspace import Workspace

Op = Callable[[Session], None]


class _NoViews:
    """The sink of a workspace nobody edits through: a harness's files are its turn's."""

    def observe_file(self, **_kw: Any) -> None: ...

    def apply_edit(self, **_kw: Any) -> None: ...


def _recorder(fields: dict[str, Any]) -> Op:
    def record(s: Session) -> None:
        s.record_hook_run(**fields)

    return record


@dataclass(frozen=True)
class HookStep:
    """What the hooks of one event did: their combined outcome, the ops recording each run,
    and the updates showing them."""

    outcome: Outcome
    ops: tuple[Op, ...]
    updates: tuple[up.Update, ...]


async def run_session_hooks(
    specs: tuple[HookSpec, ...],
    event: str,
    *,
    session_id: str,
    root: Path,
    blobs: BlobStore,
    read_only: bool,
    extra: dict[str, Any] | None = None,
    tool: str | None = None,
    tool_input: dict[str, Any] | None = None,
    tool_use_id: str | None = None,
    after_call: bool = False,
) -> HookStep | None:
    """Run the hooks of ``event`` (None when none is configured for it). ``after_call``: the
    call's result is recorded already, so each run is recorded outside it (its input names
    the call): the files it changed are its own, not the call's."""
    if not hooks_for(specs, event, tool):
        return None
    workspace = Workspace(root, blobs, _NoViews())
    ctx = ToolContext(
        root=root,
        tool_use_id=tool_use_id or "",
        sink=_NoViews(),
        workspace=workspace,
        sandbox=SandboxSettings(read_only=read_only),
    )

    async def run(spec: HookSpec, payload: dict[str, Any]) -> Ran:
        return await run_hook(spec, payload, ctx)

    ev = EventInput(
        event,
        session_id,
        root,
        tool=tool,
        tool_input=tool_input,
        tool_use_id=tool_use_id,
        extra=extra or {},
    )
    out = await run_event(specs, ev, run)
    ops: list[Op] = []
    updates: list[up.Update] = []
    for record in out.records:
        fields = {**record, "tool_use_id": None} if after_call else record
        ops.append(_recorder(fields))
        updates.append(
            up.HookRan(
                event,
                record["hook"],
                record["tool_use_id"],
                record["exit_code"],
                record["duration_ms"],
                dict(record["effect"]),
            )
        )
    return HookStep(out, tuple(ops), tuple(updates))
