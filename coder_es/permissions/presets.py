"""Agent presets: which tools an agent is offered and the rules it starts with.

- ``build``: every tool, every call allowed (doom loops and paths outside the workspace still ask).
- ``plan``: reads and searches, plus shell commands that only look (``git status``, ``ls``, ...);
  other commands ask; writes and edits are denied.
- ``explore``: reads and searches only; no shell, no writes.

MCP tools (``mcp__SERVER__TOOL``) are judged by their annotations: ``build`` allows them but asks
for destructive ones; ``plan`` and ``explore`` offer and allow only read-only ones.

Rules are listed general first: within a preset the last matching rule wins.
"""

from __future__ import annotations

from dataclasses import dataclass

from coder_es.errors import UsageError
from coder_es.permissions.rules import Rule

READ_TOOLS = ("read", "grep", "find")

# Commands that only look at things. Anything writing (redirections) or running another
# command ($(..)) is excluded by the matcher itself.
SAFE_COMMANDS = (
    "ls *",
    "pwd",
    "cat *",
    "head *",
    "tail *",
    "wc *",
    "file *",
    "stat *",
    "tree *",
    "du *",
    "which *",
    "echo *",
    "date",
    "uname *",
    "grep *",
    "rg *",
    "git status *",
    "git diff *",
    "git log *",
    "git show *",
    "git blame *",
    "git ls-files *",
    "git rev-parse *",
    "git branch --show-current",
)


@dataclass(frozen=True)
class Preset:
    name: str
    tools: tuple[str, ...]
    rules: tuple[Rule, ...]
    read_only_shell: bool = False
    """Shell commands run on a read-only file system (kernel-enforced by ``coder_es.sandbox``;
    the rules above only decide whether to ask)."""
    mcp: tuple[tuple[str, str], ...] = (
        ("read_only", "allow"),
        ("write", "deny"),
        ("destructive", "deny"),
    )
    """MCP tools by their annotated effect (``readOnlyHint``, ``destructiveHint``) -> action;
    read-only presets allow only read-only tools."""

    def mcp_action(self, effect: str) -> str:
        return dict(self.mcp).get(effect, "deny")


def _rules(name: str, spec: list[tuple[str, str | None, str]]) -> tuple[Rule, ...]:
    return tuple(Rule(tool, pattern, action, f"preset:{name}") for tool, pattern, action in spec)


PRESETS: dict[str, Preset] = {
    "build": Preset(
        "build",
        ("read", "grep", "find", "bash", "write", "edit", "task"),
        _rules("build", [("*", None, "allow")]),
        mcp=(("read_only", "allow"), ("write", "allow"), ("destructive", "ask")),
    ),
    "plan": Preset(
        "plan",
        ("read", "grep", "find", "bash"),
        _rules(
            "plan",
            [
                *((t, None, "allow") for t in READ_TOOLS),
                ("write", None, "deny"),
                ("edit", None, "deny"),
                ("bash", None, "ask"),
                *(("bash", p, "allow") for p in SAFE_COMMANDS),
            ],
        ),
        read_only_shell=True,
    ),
    "explore": Preset(
        "explore",
        READ_TOOLS,
        _rules(
            "explore",
            [
                *((t, None, "allow") for t in READ_TOOLS),
                ("write", None, "deny"),
                ("edit", None, "deny"),
                ("bash", None, "deny"),
            ],
        ),
        read_only_shell=True,
    ),
}


def get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        msg = f"unknown agent {name!r}; choose one of {', '.join(PRESETS)}"
        raise UsageError(msg) from None
