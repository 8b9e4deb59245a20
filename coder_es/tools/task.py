"""``task``: hand a piece of work to a subagent, a child session forked from this one.

The tool only states the request; the loop that runs it starts the child (``ctx.spawn``, see
``coder_es.service.tasks``). Several ``task`` calls of one response run side by side.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from coder_es.permissions.subagents import (
    BUILTIN_AGENTS,
    TASK_TOOL,
    AgentDefinition,
)
from coder_es.permissions.subject import Subject
from coder_es.tools.base import Tool, ToolContext, ToolFailure, ToolResult
from coder_es.tools.schema import ToolInputError, doc


@dataclass(frozen=True)
class TaskInput:
    description: str = field(metadata=doc("A short (3-5 word) description of the task"))
    prompt: str = field(metadata=doc("The task for the agent: everything it needs to know"))
    agent: str = field(default="general", metadata=doc("Which agent runs it"))


class TaskTool(Tool[TaskInput]):
    name: ClassVar[str] = TASK_TOOL
    description: ClassVar[str] = (
        "Start a subagent on a task: it sees this conversation so far, works on its own, and "
        "its final answer is this tool's result. Several task calls in one response run in "
        "parallel."
    )
    input_type: ClassVar[type] = TaskInput
    parallel: ClassVar[bool] = True

    def __init__(self, agents: Mapping[str, AgentDefinition] | None = None) -> None:
        self.agents = dict(agents or BUILTIN_AGENTS)

    def definition(self) -> dict[str, Any]:
        out = copy.deepcopy(super().definition())
        listed = "\n".join(f"- {a.name}: {a.description}" for a in self.agents.values())
        out["description"] = f"{self.description}\n\nAgents:\n{listed}"
        out["input_schema"]["properties"]["agent"]["enum"] = list(self.agents)
        return out

    def parse(self, raw: Any) -> TaskInput:
        args = super().parse(raw)
        if args.agent not in self.agents:
            msg = f"unknown agent {args.agent!r}; agents: {', '.join(self.agents)}"
            raise ToolInputError(msg)
        return args

    def subject(self, args: TaskInput, root: Path) -> Subject:
        return Subject("command", f"{args.agent}: {args.description}")

    async def run(self, args: TaskInput, ctx: ToolContext) -> ToolResult:
        if ctx.spawn is None:
            raise ToolFailure("subagents cannot be started here")
        result: ToolResult = await ctx.spawn(self.agents[args.agent], args)
        return result
