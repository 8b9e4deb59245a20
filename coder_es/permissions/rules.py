"""Permission rules: allow / ask / deny for a tool, optionally narrowed by a glob pattern.

Rule syntax (CLI ``--allow RULE`` / ``--deny RULE``): ``TOOL`` or ``TOOL:PATTERN``.

- ``TOOL`` is a tool name (``bash``, ``read``, ``write``, ``edit``, ``grep``, ``find``) or ``*``.
- Without a pattern the rule covers every call of the tool.
- For ``bash`` the pattern matches the command: ``*`` matches any characters (``/`` included),
  ``?`` one character, and a trailing `` *`` also matches the bare command (``git *`` covers
  ``git``). A command made of several parts (``a && b``, ``a | b``, ``a; b``) is matched part by
  part: every part must be allowed for the call to be allowed, and one denied part denies it.
  Commands with substitutions (``$(..)``, backticks, ``<(..)``) or output redirections (``>``)
  are never allowed by a pattern (only by a pattern-less rule or by asking).
- For the file tools the pattern matches the path, relative to the workspace with ``/``
  separators (absolute for paths outside it): ``*`` and ``?`` stay within one path segment, ``**``
  spans segments, ``dir/**`` covers ``dir`` and everything below it.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from functools import lru_cache

from coder_es.errors import UsageError

ACTIONS = ("allow", "ask", "deny")
TOOL_NAMES = ("bash", "read", "write", "edit", "grep", "find")


class RuleSyntaxError(UsageError):
    """A permission rule that cannot be parsed."""


@dataclass(frozen=True)
class Rule:
    tool: str  # a tool name or "*"
    pattern: str | None
    action: str  # "allow" | "ask" | "deny"
    source: str = "user"  # "user" | "preset:<name>"

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            msg = f"rule action must be one of {', '.join(ACTIONS)}, not {self.action!r}"
            raise RuleSyntaxError(msg)

    def describe(self) -> str:
        """``user:allow bash:git *``: what PermissionDecided.matched_rule records."""
        target = self.tool if self.pattern is None else f"{self.tool}:{self.pattern}"
        return f"{self.source}:{self.action} {target}"

    def covers_tool(self, tool: str) -> bool:
        return self.tool in ("*", tool)

    def matches(self, tool: str, kind: str, text: str) -> bool:
        """Whether this rule covers one subject (a command part, or a path) of ``tool``."""
        if not self.covers_tool(tool):
            return False
        if self.pattern is None:
            return True
        return glob_match(self.pattern, text, kind)


def parse_rule(text: str, action: str, source: str = "user") -> Rule:
    """``TOOL`` or ``TOOL:PATTERN`` -> a rule (see the module docstring)."""
    raw = text.strip()
    tool, sep, pattern = raw.partition(":")
    tool = tool.strip()
    if not tool:
        msg = f"bad permission rule {text!r}: expected TOOL or TOOL:PATTERN (e.g. 'bash:git *')"
        raise RuleSyntaxError(msg)
    if tool != "*" and tool not in TOOL_NAMES:
        msg = f"bad permission rule {text!r}: unknown tool {tool!r}; tools: {', '.join(TOOL_NAMES)}"
        raise RuleSyntaxError(msg)
    if sep and not pattern.strip():
        msg = f"bad permission rule {text!r}: the pattern after ':' is empty"
        raise RuleSyntaxError(msg)
    return Rule(tool=tool, pattern=pattern.strip() if sep else None, action=action, source=source)


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

_SEPARATORS = {";", "&&", "||", "|", "&", "|&", ";;", "\n"}
_COMPLEX_MARKERS = ("$(", "`", "<(", ">(")


@dataclass(frozen=True)
class CommandPart:
    text: str
    # Pattern rules cannot allow this part: it hides another command or writes a file.
    opaque: bool


def split_command(command: str) -> list[CommandPart]:
    """The simple commands a shell command line runs, for matching each against the rules."""
    opaque_all = any(marker in command for marker in _COMPLEX_MARKERS)
    lexer = shlex.shlex(command.replace("\n", " ; "), posix=True, punctuation_chars=";&|<>")
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        tokens = list(lexer)
    except ValueError:  # unbalanced quotes: the shell will refuse it too, but never allow it
        return [CommandPart(command.strip(), True)]
    parts: list[CommandPart] = []
    current: list[str] = []
    redirect = False

    def flush() -> None:
        nonlocal current, redirect
        if current:
            parts.append(CommandPart(" ".join(current), opaque_all or redirect))
        current, redirect = [], False

    for token in tokens:
        if token in _SEPARATORS:
            flush()
            continue
        if set(token) <= set("<>&") and ">" in token:
            redirect = True
        current.append(token)
    flush()
    return parts or [CommandPart(command.strip(), opaque_all)]


def suggest_pattern(kind: str, text: str) -> str:
    """The pattern an "allow always" answer covers, when the client does not name one.

    Commands: the program and its subcommand (``git status *``), or the exact command when it has
    several parts. Paths: the file's directory and everything below it.
    """
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
