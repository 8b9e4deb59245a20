"""What a permission rule matches a call against. Each tool says what its call amounts to
(``coder_es.tools.base.Tool.subject``); the rules, below the tools, decide on it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Subject:
    """What a permission rule matches a call against: a command, or a path.

    Paths are workspace-relative with ``/`` separators when inside the workspace, absolute when
    ``outside`` (those need an explicit rule).
    """

    kind: str  # "command" | "path" | "mcp" (text: the tool's name)
    text: str
    outside: bool = False
    # Other (tool, subject) pairs the call amounts to, each checked by the rules of that tool:
    # a shell command's redirections are ``write`` subjects, paths outside the workspace its
    # arguments name are ``read`` subjects.
    related: tuple[tuple[str, Subject], ...] = ()
    # The path is not known (a shell expansion, ``> $OUT``): ``text`` is its source text; only
    # pattern-less rules decide it, and a deny rule with a pattern makes it ask.
    opaque: bool = False
    effect: str = ""
    """For an MCP tool, what its annotations say it does: ``read_only``, ``write`` or
    ``destructive`` (the agent presets decide by it)."""
