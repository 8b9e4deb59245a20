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
- the sandbox: the configured one, read-only when the preset in force says so;
- the harness (another agent CLI running the session: ``coder_es.harness``): the one its
  ``Started`` settings name (``harness``: name, kind, command); a harness session is offered
  none of our tools (``SettingsConfig.tools`` None: the harness runs its own) and decides its
  questions by the same policy.

A fork into a new session is a session of its own: its ``Started`` holds the parent's agent,
provider and model in force and the parent's ``Started`` settings (``coder_es.branching``).
Moving a head within a session changes no setting: settings follow the log, not the branch.

``session_settings(events, config)`` is a function of its arguments; ``RecordedSettings.apply``
is the same fold kept up to date one event at a time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from coder_es.domain.settings import RecordedSettings, recorded_settings
from coder_es.permissions.policy import UNTRUSTED_SOURCE, Policy
from coder_es.permissions.presets import Preset, get_preset
from coder_es.permissions.rules import Rule
from coder_es.permissions.subagents import AgentDefinition, agents_from_records, recorded_tools

if TYPE_CHECKING:
    # Only a type here: importing the sandbox package would add ~0.1 s to ``coder-es context``.
    from coder_es.hooks.spec import HookSpec
    from coder_es.sandbox import SandboxSettings

    # Imported when there are tools to offer: a harness session (``run --harness``) starts its
    # harness without the tools' modules (tests/harness/test_harness_startup.py).
    from coder_es.tools.registry import ToolRegistry

DEFAULT_MAX_STEPS = 50
DEFAULT_MAX_TOKENS = 8192
DEFAULT_CONTEXT_BUDGET = 100_000


@dataclass(frozen=True)
class SettingsConfig:
    """What the configuration (and the code) contribute; the session's record wins."""

    tools: ToolRegistry | None = None
    """The tools the code has (built-in, a caller's own, ``task`` with the configured agents);
    None: the session runs none of ours (a harness session: the harness runs its own)."""
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


def rule_records(rules: Iterable[Rule]) -> list[dict[str, Any]]:
    """Rules as a ``PermissionsChanged`` event records them (the source too, so a rebuilt rule
    names itself in ``matched_rule`` as the original did)."""
    return [
        {"tool": r.tool, "pattern": r.pattern, "action": r.action, "source": r.source}
        | ({"window": r.window} if r.window is not None else {})
        for r in rules
    ]


def _key(record: Mapping[str, Any]) -> tuple[Any, ...]:
    # The source only names a rule in matched_rule (the Started settings do not record it),
    # except for an untrusted project's rule, which may only tighten: trusting the workspace
    # changes how that rule decides.
    untrusted = record.get("source") == UNTRUSTED_SOURCE
    return (record["tool"], record.get("pattern"), record["action"], untrusted)


def same_rules(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> bool:
    return [_key(r) for r in a] == [_key(r) for r in b]


def rules_end_with(records: Sequence[Mapping[str, Any]], tail: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the rules in force already end with ``tail`` (a resume with the same flags
    changes nothing, however often it is repeated)."""
    return len(tail) <= len(records) and same_rules(records[len(records) - len(tail) :], tail)


def rules_on_resume(records: list[dict[str, Any]], given: Sequence[Rule]) -> list[dict[str, Any]]:
    """The user rules in force once a session is continued with ``given`` (the configuration's
    and the command line's): appended to those in force, as among user rules the last match
    wins, unless they already end with them."""
    if given and not rules_end_with(records, rule_records(given)):
        return rule_records((*rules_from_records(records), *given))
    return records


@dataclass(frozen=True)
class RecordedHarness:
    """The harness a session is run by, as its ``Started`` settings record it."""

    name: str
    kind: str
    command: tuple[str, ...]
    env: tuple[str, ...] = ()
    """The names of the variables its configuration gives it (their values are not recorded)."""

    @classmethod
    def of(cls, record: Any) -> RecordedHarness | None:
        if not isinstance(record, Mapping) or not record.get("name"):
            return None
        return cls(
            name=str(record["name"]),
            kind=str(record.get("kind") or ""),
            command=tuple(str(c) for c in record.get("command") or ()),
            env=tuple(str(e) for e in record.get("env") or ()),
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
    tools: ToolRegistry | None
    """The code's tools, ``task`` listing the subagents the session recorded (None: a harness
    session, which runs its own)."""
    offered: tuple[str, ...]
    """The names of the tools offered to the model (MCP tools come with ``McpToolsListed``)."""
    subagents: Mapping[str, AgentDefinition]
    """What ``task`` may start (empty: the session is offered no ``task``)."""
    hooks: tuple[HookSpec, ...]
    context_budget: int
    max_tokens: int
    max_steps: int
    sandbox: SandboxSettings | None
    harness: RecordedHarness | None
    """The harness that runs the session (None: our own agent loop)."""
    recorded: RecordedSettings

    @classmethod
    def of(cls, recorded: RecordedSettings, config: SettingsConfig) -> SessionSettings:
        records, default = recorded.permission_records()
        rules = rules_from_records(records)
        policy = Policy.for_agent(recorded.agent, rules, default)  # checks the default
        policy = dataclasses.replace(
            policy, preset=with_recorded_tools(policy.preset, recorded.started)
        )
        registry, offered, subagents = _offered(config.tools, policy, recorded.started)
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
            harness=RecordedHarness.of(recorded.started.get("harness")),
            recorded=recorded,
        )


def _offered(
    tools: ToolRegistry | None, policy: Policy, started: Mapping[str, Any]
) -> tuple[ToolRegistry | None, tuple[str, ...], Mapping[str, AgentDefinition]]:
    """The registry, the names offered and the subagents ``task`` offers."""
    if tools is None:
        return None, (), {}
    from coder_es.tools.offered import session_registry
    from coder_es.tools.task import TaskTool

    registry = session_registry(tools, started)
    offered = tuple(n for n in registry.names() if n in policy.tools)
    task = registry.get("task")
    subagents: Mapping[str, AgentDefinition] = {}
    if "task" in offered and isinstance(task, TaskTool):
        subagents = dict(agents_from_records(started.get("agents")) or task.agents)
    return registry, offered, subagents


def _hooks(records: list[dict[str, Any]]) -> tuple[HookSpec, ...]:
    if not records:
        return ()
    # Imported here: a session without hooks (``coder-es context``'s start-up) does not pay it.
    from coder_es.hooks.spec import HookSpec

    return tuple(HookSpec.from_record(r) for r in records)


def session_settings(events: Iterable[Any], config: SettingsConfig) -> SessionSettings:
    """Events (a session's, in order) + configuration -> the settings it runs with."""
    return SessionSettings.of(recorded_settings(events), config)
