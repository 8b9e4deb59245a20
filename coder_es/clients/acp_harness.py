"""``coder-es acp --harness NAME``: coder-es as the ACP bridge in front of another agent CLI.

The editor talks ACP to coder-es; each of its sessions is a harness session
(``coder_es.harness.runner.HarnessSession``: the CLI's own stream, or ACP when the harness is
an ACP agent, in our sandbox, recorded). ``HarnessHandle`` gives the ACP agent
(``coder_es.clients.acp_agent``) the part of a native ``SessionHandle`` it drives, so what it
adds for native sessions works unchanged: the slash commands (``/tree``, ``/rewind``,
``/fork``, ``/switch``, ``/diff``, ``/label``, ``/search``: the conversation follows a move,
``coder_es.harness.resume``), ``session/load`` replaying the history, the tool calls and their
diffs. Modes are the agent presets, mapped to the harness's own flags and enforced by our
sandbox; what the harness asks (Claude Code's permission prompts, an ACP agent's
``request_permission``) our rules decide first, the rest the editor's user answers, and each
decision is recorded.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coder_es.agent import updates as up
from coder_es.harness.runner import HarnessSession
from coder_es.permissions.policy import PermissionAnswer


@dataclass(frozen=True)
class Opened:
    agent: str
    model: str
    provider: str


@dataclass(frozen=True)
class Outcome:
    reason: str
    error: str | None


@dataclass
class _State:
    calls: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class _Call:
    name: str
    input: dict[str, Any]


@dataclass
class _Loop:
    """What the ACP agent reads of a native loop: the calls of the turn (no tool runs in our
    executors: the harness runs its own)."""

    workspace: Path
    sink: object = field(default_factory=object)
    state: _State = field(default_factory=_State)


Ask = Callable[[up.PermissionRequired], Awaitable[PermissionAnswer]]


class HarnessHandle:
    def __init__(self, session: HarnessSession) -> None:
        self.session = session
        self.running = False
        self.outcome: Outcome | None = None
        self.loop = _Loop(session.workspace)

    @property
    def id(self) -> str:
        return self.session.id

    def opened(self) -> Opened:
        return Opened(self.session.agent, "", f"harness:{self.session.spec.name}")

    def set_agent(self, agent: str) -> None:
        """A mode: the preset the next turn runs with (its flags, our sandbox)."""
        self.session.agent = agent

    async def send(
        self, text: str, *, images: Any = (), answerer: Ask | None = None
    ) -> AsyncIterator[up.Update]:
        if images:
            from coder_es.errors import UsageError

            raise UsageError("a harness session takes text prompts only")
        self.running = True
        self.outcome = None
        self.loop.state.calls.clear()
        try:
            async for update in self.session.send(text, ask=answerer):
                if isinstance(update, up.ToolStarted):
                    self.loop.state.calls[update.tool_use_id] = _Call(
                        update.name, dict(update.input)
                    )
                yield update
        finally:
            self.running = False
            result = self.session.outcome
            self.outcome = (
                Outcome(result.reason, result.message)
                if result is not None
                else Outcome("cancelled", None)
            )

    def cancel(self, reason: str = "") -> None:
        self.session.cancel()

    async def close(self) -> None:
        self.session.cancel()

    def reload(self) -> None:
        """A branch move: the next turn plans its resume from the new head itself."""


def open_handle(
    runtime: Any, cwd: Path, spec: Any, session_id: str | None = None, agent: str | None = None
) -> HarnessHandle:
    """A new harness session in ``cwd`` (``spec``: ``--harness``), or the stored one."""
    config = runtime.config
    kw: dict[str, Any] = {
        "rules": tuple(runtime.rules),
        "default_permission": config.permissions.default,
        "network": config.sandbox.network,
        "store_path": runtime.app.config.path.resolve(),
    }
    if session_id is not None:
        return HarnessHandle(
            HarnessSession.open(runtime.app, cwd, session_id, None, config.harnesses, **kw)
        )
    if agent:
        kw["agent"] = agent
    return HarnessHandle(HarnessSession.create(runtime.app, cwd, spec, **kw))
