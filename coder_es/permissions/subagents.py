"""Subagents: what a ``task`` call may start, and what the child is allowed.

A subagent is a forked session: the child starts from the parent's conversation (``Started``
names the parent session and node; the task's tool_use id, agent and description are in its
``settings["task"]``), runs its own turn to completion with its own step limit, and its final
text is the ``task`` call's result. Its permissions are its definition's preset, never more than
the parent's: the tools it is offered are also offered to the parent, and the parent's user rules
that deny or ask still hold (``general`` takes the parent's policy as it is).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from coder_es.errors import UsageError
from coder_es.permissions.policy import Policy
from coder_es.permissions.presets import get_preset

TASK_TOOL = "task"
DEFAULT_CHILD_STEPS = 25


@dataclass(frozen=True)
class AgentDefinition:
    name: str
    description: str
    preset: str | None = None
    """A preset name (build, plan, explore); None: the parent's policy as it is."""
    model: str | None = None
    """None: the parent's model (always the parent's provider)."""
    prompt: str = ""
    """Instructions put before the task's prompt."""
    max_steps: int = DEFAULT_CHILD_STEPS
    tools: tuple[str, ...] | None = None
    """None: every tool the preset offers."""


BUILTIN_AGENTS: dict[str, AgentDefinition] = {
    "general": AgentDefinition(
        "general",
        "General-purpose agent for complex multi-step work; several run in parallel. "
        "It has your permissions.",
    ),
    "explore": AgentDefinition(
        "explore",
        "Read-only search specialist: finds files and code and reports what it found.",
        preset="explore",
    ),
}


def agent_definitions(config: Mapping[str, Mapping[str, Any]] | None) -> dict[str, AgentDefinition]:
    """The built-ins, then ``[agents.NAME]`` tables of the configuration (which may replace
    a built-in)."""
    out = dict(BUILTIN_AGENTS)
    for name, table in (config or {}).items():
        tools = table.get("tools")
        steps = table.get("max_steps", DEFAULT_CHILD_STEPS)
        if not isinstance(steps, int) or steps < 1:
            msg = f"agents.{name}.max_steps must be a positive integer, not {steps!r}"
            raise UsageError(msg)
        preset = table.get("preset")
        if preset is not None:
            get_preset(str(preset))  # an unknown preset is a usage error, named
        out[name] = AgentDefinition(
            name=str(table.get("name", name)),
            description=str(table.get("description", "")),
            preset=None if preset is None else str(preset),
            model=table.get("model"),
            prompt=str(table.get("prompt", "")),
            max_steps=steps,
            tools=None if tools is None else tuple(str(t) for t in tools),
        )
    return out


def agent_records(agents: Mapping[str, AgentDefinition]) -> list[dict[str, Any]]:
    """The definitions ``task`` offers, as a session's ``Started`` settings record them (a list:
    their order is the order the tool's description lists them in)."""
    return [
        {
            "key": key,
            "name": a.name,
            "description": a.description,
            "preset": a.preset,
            "model": a.model,
            "prompt": a.prompt,
            "max_steps": a.max_steps,
            "tools": None if a.tools is None else list(a.tools),
        }
        for key, a in agents.items()
    ]


def agents_from_records(records: Any) -> dict[str, AgentDefinition] | None:
    """The definitions a session recorded (``agent_records``); None where it recorded none
    (started before they were recorded). Damaged records raise ``UsageError`` naming them."""
    if records is None:
        return None
    out: dict[str, AgentDefinition] = {}
    try:
        for r in records:
            tools = r["tools"]
            out[str(r["key"])] = AgentDefinition(
                name=str(r["name"]),
                description=str(r["description"]),
                preset=None if r["preset"] is None else str(r["preset"]),
                model=None if r["model"] is None else str(r["model"]),
                prompt=str(r["prompt"]),
                max_steps=int(r["max_steps"]),
                tools=None if tools is None else tuple(str(t) for t in tools),
            )
    except (KeyError, TypeError, ValueError) as e:
        msg = f"the session's recorded agent definitions (settings.agents) are damaged: {e!r}"
        raise UsageError(msg) from None
    return out


def recorded_tools(tools: Iterable[str], settings: Mapping[str, Any]) -> tuple[str, ...]:
    """The tools a session offers, of ``tools``: ``task`` only where it recorded ``subagents``
    (sessions started before subagents existed never offer it), and only those of its recorded
    ``tools`` where it has them (a subagent's)."""
    return tuple(
        t
        for t in tools
        if (t != TASK_TOOL or settings.get("subagents"))
        and ("tools" not in settings or t in settings["tools"])
    )


def child_policy(definition: AgentDefinition, parent: Policy) -> Policy:
    """The child's policy: never more than the parent's, and no further ``task`` calls."""
    offered = set(parent.tools)
    if definition.tools is not None:
        offered &= set(definition.tools)
    offered.discard(TASK_TOOL)
    if definition.preset is None:
        base = parent.preset
        rules = parent.user_rules
        read_only_shell = parent.preset.read_only_shell
    else:
        base = get_preset(definition.preset)
        # The parent's allowances are its own; what it denies or asks about stays so.
        rules = tuple(r for r in parent.user_rules if r.action != "allow")
        read_only_shell = base.read_only_shell or parent.preset.read_only_shell
    tools = tuple(t for t in base.tools if t in offered)
    preset = replace(base, tools=tools, read_only_shell=read_only_shell)
    return replace(parent, preset=preset, user_rules=rules)


def net_changes(changes: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The files a child changed, from its tool results' ``files_changed`` in order: each
    path's first ``before`` and last ``after`` (conflicts left nothing on disk)."""
    first: dict[str, Any] = {}
    last: dict[str, Any] = {}
    for change in changes:
        if change.get("outcome") == "conflict":
            continue
        path = change["path"]
        first.setdefault(path, change.get("before"))
        last[path] = change.get("after")
    return [{"path": p, "before": first[p], "after": last[p]} for p in first if first[p] != last[p]]
