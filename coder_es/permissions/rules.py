"""Permission rules: allow / ask / deny for a tool, optionally narrowed by a glob pattern.

Rule syntax (CLI ``--allow RULE`` / ``--deny RULE``): ``TOOL`` or ``TOOL:PATTERN``.

- ``TOOL`` is a tool name (``bash``, ``read``, ``write``, ``edit``, ``grep``, ``find``), ``*``,
  an MCP tool ``mcp__SERVER__TOOL`` or every tool of a server ``mcp__SERVER__*``.
- Without a pattern the rule covers every call of the tool.
- For ``bash`` the pattern matches each simple command the line runs, as ``shell_parse`` finds
  them with a real shell grammar (pipelines, lists, subshells, substitutions, control flow,
  function bodies, wrappers like ``env``/``sudo``/``xargs``/``sh -c``/``find -exec``; quotes
  removed, ``/bin/rm`` read as ``rm``): ``*`` matches any characters (``/`` included), ``?`` one
  character, and a trailing `` *`` also matches the bare command (``git *`` covers ``git``).
  Every command must be allowed for the call to be allowed, and one denied command denies it.
  A command with an argument whose value is unknown (``$X``, ``$(..)``), in a line that
  writes a file, or in a line that gives programs a variable off the allow-list
  (``shell_parse.FORMATTING_VARIABLES``: ``X=1 cmd``, ``env X=1``, ``export X``), is never
  allowed by a pattern (only by a pattern-less rule or by asking); a command the parser cannot
  see (``$X`` as the name, ``eval "$x"``, unparseable input) asks.
- For the file tools the pattern matches the path, relative to the workspace with ``/``
  separators (absolute for paths outside it): ``*`` and ``?`` stay within one path segment, ``**``
  spans segments, ``dir/**`` covers ``dir`` and everything below it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from coder_es.errors import UsageError
from coder_es.permissions.schedule import (
    Window,
    WindowSyntaxError,
    action_window,
    split_scheduled,
)

ACTIONS = ("allow", "schedule", "ask", "defer", "deny")
TOOL_NAMES = ("bash", "read", "write", "edit", "grep", "find", "task")


class RuleSyntaxError(UsageError):
    """A permission rule that cannot be parsed."""


@dataclass(frozen=True)
class Rule:
    tool: str  # a tool name or "*"
    pattern: str | None
    action: str  # "allow" | "schedule" | "ask" | "defer" | "deny"
    source: str = "user"  # "user" | "preset:<name>"
    window: str | None = None
    """A ``schedule`` rule's time window, ``HH:MM-HH:MM`` UTC (``permissions.schedule``)."""

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            msg = f"rule action must be one of {', '.join(ACTIONS)}, not {self.action!r}"
            raise RuleSyntaxError(msg)
        if (self.action == "schedule") != (self.window is not None):
            msg = "a schedule rule, and only one, has a time window (TOOL[:PATTERN]@HH:MM-HH:MM)"
            raise RuleSyntaxError(msg)
        if self.window is not None:
            try:
                Window.parse(self.window)
            except WindowSyntaxError as e:
                raise RuleSyntaxError(str(e)) from None

    def describe(self) -> str:
        """``user:allow bash:git *``: what PermissionDecided.matched_rule records (a schedule
        rule ends with its window: ``user:schedule bash:make deploy*@22:00-06:00``)."""
        target = self.tool if self.pattern is None else f"{self.tool}:{self.pattern}"
        window = f"@{self.window}" if self.window is not None else ""
        return f"{self.source}:{self.action} {target}{window}"

    def covers_tool(self, tool: str) -> bool:
        if self.tool in ("*", tool):
            return True
        # ``mcp__NAME__*``: every tool of one MCP server.
        return (
            is_mcp_tool(self.tool) and self.tool.endswith("__*") and tool.startswith(self.tool[:-1])
        )

    def matches(self, tool: str, kind: str, text: str) -> bool:
        """Whether this rule covers one subject (a command part, or a path) of ``tool``."""
        if not self.covers_tool(tool):
            return False
        if self.pattern is None:
            return True
        return glob_match(self.pattern, text, kind)


def is_mcp_tool(name: str) -> bool:
    """``mcp__SERVER__TOOL``: a tool an MCP server offers (``coder_es.mcp``)."""
    return re.fullmatch(r"mcp__[A-Za-z0-9_-]+__.+", name) is not None


def parse_rule(text: str, action: str, source: str = "user") -> Rule:
    """``TOOL`` or ``TOOL:PATTERN`` -> a rule (see the module docstring); a ``schedule`` rule
    is ``TOOL[:PATTERN]@HH:MM-HH:MM``."""
    window = None
    if action == "schedule":
        try:
            text, parsed = split_scheduled(text)
        except WindowSyntaxError as e:
            raise RuleSyntaxError(str(e)) from None
        window = parsed.text
    raw = text.strip()
    tool, sep, pattern = raw.partition(":")
    tool = tool.strip()
    if not tool:
        msg = f"bad permission rule {text!r}: expected TOOL or TOOL:PATTERN (e.g. 'bash:git *')"
        raise RuleSyntaxError(msg)
    if tool != "*" and tool not in TOOL_NAMES and not is_mcp_tool(tool):
        msg = f"bad permission rule {text!r}: unknown tool {tool!r}; tools: {', '.join(TOOL_NAMES)}"
        raise RuleSyntaxError(msg)
    if sep and not pattern.strip():
        msg = f"bad permission rule {text!r}: the pattern after ':' is empty"
        raise RuleSyntaxError(msg)
    return Rule(
        tool=tool,
        pattern=pattern.strip() if sep else None,
        action=action,
        source=source,
        window=window,
    )


def configured_rule(tool: str, pattern: str | None, action: str, source: str) -> Rule:
    """A rule of the config, whose action may be ``schedule@HH:MM-HH:MM``."""
    name, window = action_window(action)
    return Rule(tool, pattern, name, source, window.text if window is not None else None)


# ---------------------------------------------------------------------- glob matching


@lru_cache(maxsize=1024)
def _compile(pattern: str, kind: str) -> re.Pattern[str]:
    out: list[str] = []
    i = 0
    n = len(pattern)
    while i < n:
        c = pattern[i]
        if kind == "path" and pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif kind == "path" and pattern.startswith("/**", i) and i + 3 == n:
            out.append("(?:/.*)?")
            i += 3
        elif kind == "path" and pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append(".*" if kind == "command" else "[^/]*")
            i += 1
        elif c == "?":
            out.append("." if kind == "command" else "[^/]")
            i += 1
        else:
            out.append(re.escape(c))
            i += 1
    body = "".join(out)
    if kind == "command" and pattern.endswith(" *"):
        # "git *" also covers plain "git".
        body = f"(?:{body}|{re.escape(pattern[:-2])})"
    return re.compile(body + r"\Z", re.DOTALL)


def glob_match(pattern: str, text: str, kind: str) -> bool:
    return _compile(pattern, kind).match(text) is not None


# ---------------------------------------------------------------------- shell commands


@dataclass(frozen=True)
class CommandPart:
    text: str
    # Pattern rules cannot allow this part: an argument's value is unknown, the line writes a
    # file, or the command itself is hidden.
    opaque: bool
    # Why the command this part runs cannot be known (the policy asks), or None.
    hidden: str | None = None
    # Variables off the allow-list that the line gives its programs (``GIT_DIR, PATH``), or
    # None: any of its commands may then run something its words do not say.
    environment: str | None = None


def split_command(command: str) -> list[CommandPart]:
    """The simple commands a shell command line runs (``shell_parse``), for matching each
    against the rules."""
    # Imported at the first command matched (the shell grammar and its patterns): a run whose
    # rules are only read and recorded (``run --harness --yes``) starts without them.
    from coder_es.permissions.shell_parse import parse_shell

    line = parse_shell(command)
    writes = any(use.mode == "write" for use in line.paths)
    environment = ", ".join(line.environment) if line.environment else None
    tainted = writes or environment is not None
    parts = [
        CommandPart(c.text, c.opaque or tainted or c.hidden is not None, c.hidden, environment)
        for c in line.commands
    ]
    return parts or [CommandPart(command.strip(), tainted, None, environment)]


def suggest_pattern(kind: str, text: str) -> str:
    """The pattern an "allow always" answer covers, when the client does not name one.

    Commands: the program and its subcommand (``git status *``), or the exact command when it has
    several parts. Paths: the file's directory and everything below it.
    """
    if kind == "mcp":
        return "*"
    if kind == "command":
        parts = split_command(text)
        if len(parts) != 1 or parts[0].opaque:
            return text
        words = parts[0].text.split()
        if not words:
            return text
        keep = words[:2] if len(words) > 1 and not words[1].startswith("-") else words[:1]
        return " ".join(keep) + " *"
    head, _, _ = text.rpartition("/")
    return f"{head}/**" if head else "**" if not text.startswith("/") else "/**"
