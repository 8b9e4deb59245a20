"""What a tool is, what it gets to run, and what it returns.

A tool has a name, a description, a typed input (a frozen dataclass whose JSON schema the model
sees) and an async ``run``. Tools are cancellable: cancelling the task that runs one stops it
(``bash`` kills its process group, file walks check ``ctx.cancelled`` between files). A tool
reports failure by returning ``ToolResult(is_error=True)`` or raising ``ToolFailure``; any other
exception is a bug in the tool, but the executor still turns it into an error result so that the
loop never crashes on a tool.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from coder_es.errors import CoderESError
from coder_es.permissions.subject import Subject
from coder_es.tools.schema import json_schema, parse_input
from coder_es.workspace.workspace import EventSink

InputT = TypeVar("InputT")


class ToolFailure(CoderESError):
    """A tool could not do what was asked; the message goes to the model as an error result."""


@dataclass(frozen=True)
class ToolCall:
    """One tool_use block of a model response."""

    id: str
    name: str
    input: dict[str, Any]


@dataclass(frozen=True)
class FileChange:
    """A file a tool changed: content hashes before and after (None: absent).

    A shell command run as a transaction also says how its change met the disk: ``outcome``
    "direct", "merged" (with a concurrent edit) or "conflict" (not applied: ``before`` and
    ``after`` are the disk's version, ``proposed`` the command's, kept in the blob store). A
    merged change records ``own``: the command's change applied to what the session knew,
    without the user's concurrent bytes that ``after`` holds; the session's file state keeps it
    as the session's own content (``projections.files``), the base of later restorations.
    """

    path: str
    before: str | None
    after: str | None
    outcome: str | None = None
    proposed: str | None = None
    own: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "before": self.before, "after": self.after}
        if self.outcome is not None:
            out["outcome"] = self.outcome
        if self.outcome == "conflict":
            out["proposed"] = self.proposed
        if self.outcome == "merged" and self.own is not None:
            out["own"] = self.own
        return out


@dataclass(frozen=True)
class ToolResult:
    """What a tool produced. ``output`` is the full text; capping for the model happens later."""

    output: str
    is_error: bool = False
    files_changed: tuple[FileChange, ...] = ()
    # What a client may want besides the text (a ``task`` result names its child session).
    metadata: dict[str, Any] = field(default_factory=dict)


ProgressFn = Callable[[str], None]


@dataclass
class ToolContext:
    """Everything a running tool may use. One per call."""

    root: Path
    tool_use_id: str
    sink: EventSink
    workspace: Any  # coder_es.workspace.Workspace: sandbox, snapshots, merge, change detection
    progress: ProgressFn = field(default=lambda _text: None)
    # The permission layer allowed a path outside the workspace for this call.
    outside_ok: bool = False
    # Set when the call is cancelled; threads doing file walks check it between files.
    cancelled: threading.Event = field(default_factory=threading.Event)
    # Per-session caches shared by the calls of one loop (bash keeps its stat index here).
    cache: dict[str, Any] = field(default_factory=dict)
    # How shell commands run (coder_es.sandbox.SandboxSettings); None: from the environment.
    sandbox: Any = None
    # The loop's tools (coder_es.tools.registry.ToolRegistry): the built-in ones plus the MCP
    # tools this session was offered; None: the executor's own.
    tools: Any = None
    # Starts a subagent (``task``): (definition, TaskInput) -> its result; None: not here.
    spawn: Any = None
    # An editor's terminal (coder_es.tools.terminal.Terminal) that runs this call's shell command
    # where the user watches it; None: bash runs it as a child of this process.
    terminal: Any = None


class Tool(ABC, Generic[InputT]):
    """A tool the model can call."""

    name: ClassVar[str]
    description: ClassVar[str]
    input_type: ClassVar[type]
    # Read-only tools of one response run concurrently; the others run one at a time, in order.
    read_only: ClassVar[bool] = False
    # May run side by side with the other calls of its batch although it is not read-only
    # (``task``: each child is its own session; its edits merge like any edit).
    parallel: ClassVar[bool] = False

    def definition(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": json_schema(self.input_type),
        }

    def parse(self, raw: Any) -> InputT:
        result: InputT = parse_input(self.input_type, raw)
        return result

    @abstractmethod
    def subject(self, args: InputT, root: Path) -> Subject:
        """What permission rules are matched against for these arguments."""

    @abstractmethod
    async def run(self, args: InputT, ctx: ToolContext) -> ToolResult:
        """Do the work. Raise ``ToolFailure`` for an error the model should see."""
