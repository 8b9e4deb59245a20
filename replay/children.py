"""Live replay of subagents: a ``task`` call of the replayed session runs its child again.

The child runs through the service's own ``TaskRunner`` (the same fork, policy, settings, lease,
progress forwarding and result as in a real run); only its seams differ (``TaskRunner.seams``):

- its id is the recorded child's, so its events line up with the child's cassette;
- its model calls are served from the child's cassette, each request checked against the
  recorded one (``replay.provider``), and its permission questions answered from it;
- its tools run for real, in the parent's scratch workspace (the child's engine is the
  executor, as the parent's engine is the parent's).

A child's engine (``replay.engine.ReplayEngine`` with a parent) compares the child's events with
its cassette as they appear. When the child diverges, the divergence is kept by the top engine
(the exception would otherwise become the task call's error result) and named with the child's
path; every engine stops at its next seam and the report shows that divergence.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from coder_es.agent.runner import AgentLoop
from coder_es.service.tasks import ChildSeams, TaskRunner
from coder_es.tools.base import ToolCall, ToolResult


class ChildReplay(Protocol):
    def child_seams(self, model: str) -> ChildSeams: ...

    def child_finished(self) -> None:
        """The child's turn ended: raise if its recording has more of it."""

    def child_cancelled(self) -> None:
        """Cancelled with the parent's turn; keep any divergence up to then."""

    def child_failed(self, error: Exception) -> None:
        """Keep the divergence ``error`` stands for, named with the child's path."""


def _no_provider(_name: str, _model: str) -> Any:  # pragma: no cover - seams() provides it
    raise AssertionError("a replayed subagent's provider comes from its cassette")


class ReplaySpawner(TaskRunner):
    """Runs one recorded subagent again."""

    def __init__(self, child: ChildReplay) -> None:
        super().__init__(_no_provider)
        self.child = child

    def seams(self, parent: AgentLoop, call: ToolCall, provider: str, model: str) -> ChildSeams:
        return self.child.child_seams(model)

    async def run_child(
        self, parent: AgentLoop, call: ToolCall, definition: Any, args: Any
    ) -> ToolResult:
        try:
            result = await super().run_child(parent, call, definition, args)
            self.child.child_finished()
        except asyncio.CancelledError:
            self.child.child_cancelled()
            raise
        except Exception as e:
            self.child.child_failed(e)
            raise
        return result
