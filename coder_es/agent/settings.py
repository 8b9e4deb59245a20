"""A session's settings in one pure projection: its events plus the configuration -> what it
runs with (issue 36.1).

What a session runs with was assembled in many places (the service, the decider, the task
tool, the loop following ``SettingsChanged`` / ``PermissionsChanged`` / ``HooksChanged``); each
applied one rule of the same fold. Here is the fold, once:

- the agent preset, provider and model: the last ``SettingsChanged``'s, else ``Started``'s;
- the user's permission rules and default: the last ``PermissionsChanged``'s, else those the
  ``Started`` settings recorded (``permissions``);
- the tools offered: the preset's, only ``task`` where the session recorded ``subagents`` and
  only its recorded ``tools`` where it has them (a subagent's), plus those a user rule names
  (``Policy.tools``), of the tools the code has (``SettingsConfig.tools``);
- the subagents ``task`` offers: those the session recorded (``agents``), else the
  configuration's;
- the hooks: the last ``HooksChanged``'s, else the ``Started`` settings';
- the request budget: the last ``SettingsChanged``'s, else ``Started``'s ``context_budget``,
  else the configuration's; ``max_tokens`` and ``max_steps`` as recorded, else configured;
- the sandbox: the configured one, read-only when the preset in force says so.

A fork into a new session is a session of its own: its ``Started`` holds the parent's agent,
provider and model in force and the parent's ``Started`` settings (``coder_es.branching``).
Moving a head within a session changes no setting: settings follow the log, not the branch.

``session_settings(events, config)`` is a function of its arguments; ``RecordedSettings.apply``
is the same fold kept up to date one event at a time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from coder_es.domain.settings import RecordedSettings, recorded_settings
from coder_es.permissions.policy import Policy
from coder_es.permissions.presets import Preset, get_preset
from coder_es.permissions.rules import Rule
from coder_es.permissions.subagents import AgentDefinition, agents_from_records, recorded_tools
from coder_es.tools.offered import session_registry
from coder_es.tools.registry import ToolRegistry
from coder_es.tools.task import TaskTool

if TYPE_CHECKING:
    # Only a type here: importing the sandbox package would add ~0.1 s to ``coder-es context``.
    from coder_es.hooks.spec import HookSpec
    from coder_es.sandbox import SandboxSettings

DEFAULT_MAX_STEPS = 50
DEFAULT_MAX_TOKENS = 8192
DEFAULT_CONTEXT_BUDGET = 100_000


@dataclass(frozen=True)
class SettingsConfig:
    """What the configuration (and the code) contribute; the session's record wins."""

    tools: ToolRegistry
    """The tools the code has (built-in, a caller's own, ``task`` with the configured agents)."""
    context_budget: int = DEFAULT_CONTEXT_BUDGET
    """For a session that recorded no budget (recorded before budgets were)."""
    max_tokens: int = DEFAULT_MAX_TOKENS
    max_steps: int = DEFAULT_MAX_STEPS
    sandbox: SandboxSettings | None = None
    """None: decided where commands run (``SandboxSettings.from_environ``)."""


def with_recorded_tools(preset: Preset, started: Mapping[str, Any]) -> Preset:
    """``preset`` offering only the tools the session recorded (``recorded_tools``), its shell
    read-only where the session recorded so: the one rule for it, used by the service, the
    decider and this projection."""
    tools = recorded_tools(preset.tools, started)
    # A subagent of a read-only parent records that its shell is read-only too
    # (``child_policy``): a record only ever tightens the preset, never loosens it.
    read_only = preset.read_only_shell or started.get("read_only_shell") is True
    if tools == preset.tools and read_only == preset.read_only_shell:
        return preset
    return dataclasses.replace(preset, tools=tools, read_only_shell=read_only)


def preset_in_force(agent: str, started: Mapping[str, Any]) -> Preset:
    """The agent's preset, offering the tools the session recorded."""
    return with_recorded_tools(get_preset(agent), started)


def rules_from_records(records: Iterable[Mapping[str, Any]]) -> tuple[Rule, ...]:
    """User rules as ``PermissionsChanged`` / the ``Started`` settings record them."""
    return tuple(
        Rule(r["tool"], r.get("pattern"), r["action"], r.get("source") or "user", r.get("window"))
        for r in records
    )


@dataclass(frozen=True)
class SessionSettings:
    """What a session runs with now (see the module docstring for where each comes from)."""

    agent: str
    provider: str
    model: str
    rules: tuple[Rule, ...]
    """The user's rules in force (the preset's are in ``policy.preset.rules``)."""
    default_permission: str
    policy: Policy
    """The preset in force (with the tools the session offers), the user rules, the default."""
    tools: ToolRegistry
    """The code's tools, ``task`` listing the subagents the session recorded."""
    offered: tuple[str, ...]
    """The names of the tools offered to the model (MCP tools come with ``McpToolsListed``)."""
    subagents: Mapping[str, AgentDefinition]
    """What ``task`` may start (empty: the session is offered no ``task``)."""
    hooks: tuple[HookSpec, ...]
    context_budget: int
    max_tokens: int
    max_steps: int
    sandbox: SandboxSettings | None
    recorded: RecordedSettings

    @classmethod
    def of(cls, recorded: RecordedSettings, config: SettingsConfig) -> SessionSettings:
        records, default = recorded.permission_records()
        rules = rules_from_records(records)
        policy = Policy.for_agent(recorded.agent, rules, default)  # checks the default
        policy = dataclasses.replace(
            policy, preset=with_recorded_tools(policy.preset, recorded.started)
        )
        registry = session_registry(config.tools, recorded.started)
        offered = tuple(n for n in registry.names() if n in policy.tools)
        task = registry.get("task")
        subagents: Mapping[str, AgentDefinition] = {}
        if "task" in offered and isinstance(task, TaskTool):
            subagents = dict(agents_from_records(recorded.started.get("agents")) or task.agents)
        budget = recorded.context_budget()
        max_steps = recorded.started.get("max_steps")
        sandbox = config.sandbox
        if sandbox is not None and policy.shell_read_only and not sandbox.read_only:
            # A read-only agent changes nothing that outlives its command (``AgentLoop._sandbox``).
            sandbox = dataclasses.replace(sandbox, read_only=True, writable=())
        return cls(
            agent=recorded.agent,
            provider=recorded.provider,
            model=recorded.model,
            rules=rules,
            default_permission=default,
            policy=policy,
            tools=registry,
            offered=offered,
            subagents=subagents,
            hooks=_hooks(recorded.hook_records()),
            context_budget=budget if budget is not None else config.context_budget,
            max_tokens=int(recorded.started.get("max_tokens", config.max_tokens)),
            max_steps=max_steps
            if isinstance(max_steps, int) and max_steps > 0
            else config.max_steps,
            sandbox=sandbox,
            recorded=recorded,
        )


def _hooks(records: list[dict[str, Any]]) -> tuple[HookSpec, ...]:
    if not records:
        return ()
    # Imported here: a session without hooks (``coder-es context``'s start-up) does not pay it.
    from coder_es.hooks.spec import HookSpec

    return tuple(HookSpec.from_record(r) for r in records)


def session_settings(events: Iterable[Any], config: SettingsConfig) -> SessionSettings:
    """Events (a session's, in order) + configuration -> the settings it runs with."""
    return SessionSettings.of(recorded_settings(events), config)
