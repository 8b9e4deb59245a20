"""What a harness's own stream says, in one vocabulary for every CLI (the adapters decode into it).

A turn is a sequence of these; ``coder_es.harness.turn`` turns them into session events: text and
tool uses up to a tool result make one model response, each tool result closes its call (and is
a file boundary: the changes since the previous boundary are that call's).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class HarnessStarted:
    session_id: str | None
    model: str = ""
    version: str | None = None


@dataclass(frozen=True)
class Text:
    text: str
    message_id: str | None = None


@dataclass(frozen=True)
class Thinking:
    text: str


@dataclass(frozen=True)
class ToolUse:
    id: str
    name: str
    input: dict[str, Any]


@dataclass(frozen=True)
class ToolResult:
    id: str
    output: str
    is_error: bool = False
    name: str | None = None  # a call that only shows its end (Codex file changes)
    input: dict[str, Any] | None = None


@dataclass(frozen=True)
class Usage:
    usage: dict[str, int]
    cost_usd: float | None = None


@dataclass(frozen=True)
class Denied:
    """The harness itself refused a call (its own permission rules)."""

    id: str
    tool: str
    reason: str


@dataclass(frozen=True)
class Finished:
    ok: bool
    reason: str = "end_turn"
    error: str | None = None


@dataclass(frozen=True)
class Note:
    """Something the harness said that is neither text nor a call (a warning)."""

    text: str


HarnessEvent = (
    HarnessStarted | Text | Thinking | ToolUse | ToolResult | Usage | Denied | Finished | Note
)


@dataclass
class Decoded:
    events: list[HarnessEvent] = field(default_factory=list)
