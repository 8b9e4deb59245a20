"""The subagents a session's ``task`` tool offers, read from and set on a tool registry. Above
``task`` and ``registry`` (``registry``'s default set includes ``task``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coder_es.permissions.subagents import TASK_TOOL, agent_records, agents_from_records
from coder_es.tools.registry import ToolRegistry
from coder_es.tools.task import TaskTool


def offered_agents(registry: ToolRegistry) -> list[dict[str, Any]] | None:
    """What a new session records as its agents: those ``registry``'s ``task`` offers."""
    tool = registry.get(TASK_TOOL)
    return agent_records(tool.agents) if isinstance(tool, TaskTool) else None


def session_registry(registry: ToolRegistry, settings: Mapping[str, Any]) -> ToolRegistry:
    """``registry`` with ``task`` offering the agents the session recorded: a resume or replay
    lists (and starts) what it was offered, whatever the configuration says now."""
    recorded = agents_from_records(settings.get("agents"))
    tool = registry.get(TASK_TOOL)
    if recorded is None or not isinstance(tool, TaskTool) or tool.agents == recorded:
        return registry
    return registry.replaced(TaskTool(recorded))
