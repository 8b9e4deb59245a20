"""A configured hook: which event, which tools (a matcher), what runs, how long, what a failure
means, and which dialect it speaks.

Configuration order is the order hooks run in: the user config's hooks first, then the project
config's, each in file order (``[[hooks.PreToolUse]]`` tables). A hook's identity names its
event, its position and its file; its digest is the sha256 of its command, so a record says
exactly which command answered.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

EVENTS: tuple[str, ...] = (
    "SessionStart",
    "UserPromptSubmit",
    "PreToolUse",
    "PermissionRequest",
    "PostToolUse",
    "PostToolUseFailure",
    "Stop",
    "SubagentStop",
    "PreCompact",
    "SessionEnd",
    "Notification",
)
# Events whose matcher is tested against a tool name (the others ignore it, as Claude Code does).
TOOL_EVENTS = frozenset({"PreToolUse", "PermissionRequest", "PostToolUse", "PostToolUseFailure"})
DIALECTS = ("coder-es", "claude-code")
ON_FAILURE = ("ignore", "block")
DEFAULT_TIMEOUT_S = 60.0  # Claude Code's default for command hooks

# Only letters, digits, '_' and '|': a list of exact names (Claude Code treats such a matcher
# so); anything else is a regular expression searched in the name.
_EXACT = re.compile(r"[A-Za-z0-9_|]*")


@lru_cache(maxsize=256)
def _compiled(matcher: str) -> re.Pattern[str] | frozenset[str]:
    if _EXACT.fullmatch(matcher):
        return frozenset(matcher.split("|"))
    return re.compile(matcher)


def matcher_matches(matcher: str, name: str) -> bool:
    """Claude Code's matcher rule: empty or ``*`` match every tool; a plain name (or names
    joined by ``|``) matches exactly; anything else is a regex searched in the tool name
    (``mcp__memory__.*``, ``^Notebook``). Case-sensitive."""
    if matcher in ("", "*"):
        return True
    compiled = _compiled(matcher)
    if isinstance(compiled, frozenset):
        return name in compiled
    return compiled.search(name) is not None


def check_matcher(matcher: str) -> str | None:
    """Why ``matcher`` is not a valid matcher, or None."""
    if matcher in ("", "*") or _EXACT.fullmatch(matcher):
        return None
    try:
        re.compile(matcher)
    except re.error as e:
        return f"not a valid regular expression: {e}"
    return None


@dataclass(frozen=True)
class HookSpec:
    """One configured hook (``[[hooks.EVENT]]``) or plugin (``command = "plugin:NAME"``)."""

    event: str
    command: str
    matcher: str = ""
    timeout: float = DEFAULT_TIMEOUT_S
    on_failure: str = "ignore"  # "ignore" | "block": what a failed hook (exit 1, timeout) does
    dialect: str = "coder-es"  # "coder-es" | "claude-code"
    source: str = ""  # the config file it came from ("" for one built in code)
    index: int = 0  # its position among the event's hooks

    @property
    def plugin(self) -> str | None:
        """The plugin's name when this runs a Python plugin (``plugin:NAME``), else None."""
        return self.command[7:] if self.command.startswith("plugin:") else None

    @property
    def identity(self) -> str:
        if self.plugin is not None:
            return f"plugin:{self.plugin}"
        where = f" ({self.source})" if self.source else ""
        return f"hooks.{self.event}[{self.index}]{where}"

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.command.encode("utf-8", "surrogateescape")).hexdigest()

    def matches(self, tool: str | None) -> bool:
        """Whether this hook runs for a call of ``tool`` (our name; a Claude Code hook's
        matcher sees Claude Code's name). Events without a tool run every hook."""
        if self.event not in TOOL_EVENTS or tool is None:
            return True
        if self.dialect == "claude-code":
            from coder_es.hooks.dialect import claude_tool_name

            tool = claude_tool_name(tool)
        return matcher_matches(self.matcher, tool)

    def to_record(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> HookSpec:
        fields = {k: record[k] for k in cls.__dataclass_fields__ if k in record}
        return cls(**fields)


def hooks_for(specs: tuple[HookSpec, ...], event: str, tool: str | None = None) -> list[HookSpec]:
    """The hooks that run for ``event`` (and a call of ``tool``), in configuration order."""
    return [s for s in specs if s.event == event and s.matches(tool)]
