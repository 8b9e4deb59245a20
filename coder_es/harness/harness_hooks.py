"""The hooks a harness session offers (``coder_es.harness.outside_hooks``; ``docs/harness.md``).

Before a turn: ``SessionStart`` (a new session) and ``UserPromptSubmit`` (the prompt coder-es
forwards): their context is added to what the harness is sent, a block erases the prompt (the
harness never runs; the reason is the user's). After the turn, once its changes are applied
and recorded: ``PostToolUse`` / ``PostToolUseFailure`` for each of its calls in order, and
``Stop``. They only observe (the harness already ran the calls and ended its turn): what they
answer is recorded and shown, and the files they change are merged and recorded like any
hook's outside a call (the call's result was recorded before they ran).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from coder_es.agent import updates as up
from coder_es.domain.session import Session
from coder_es.harness.outside_hooks import HookStep, Op, run_session_hooks

if TYPE_CHECKING:
    from coder_es.harness.runner import HarnessSession
    from coder_es.harness.turn import TurnResult
    from coder_es.hooks.spec import HookSpec


class HarnessHooks:
    """The hooks of one harness turn: ``before`` it, ``after`` it; ``ops`` record their runs,
    ``updates`` show them."""

    def __init__(
        self, session: HarnessSession, hooks: tuple[HookSpec, ...], read_only: bool
    ) -> None:
        self.session = session
        self.hooks = hooks
        """The hooks in force (``SessionSettings.hooks``)."""
        self.read_only = read_only
        self.ops: list[Op] = []
        self.updates: list[up.Update] = []

    async def _run(self, event: str, **kw: Any) -> HookStep | None:
        s = self.session
        step = await run_session_hooks(
            self.hooks,
            event,
            session_id=s.id,
            root=s.workspace,
            blobs=s.app.blobs.for_session(s.session_id),
            read_only=self.read_only,
            **kw,
        )
        if step is not None:
            self.ops += step.ops
            self.updates += step.updates
        return step

    async def before(self, prompt: str) -> str | None:
        """The prompt to send the harness, or None when a hook blocked it."""
        context: list[str] = []
        if not self.session.exists:
            start = await self._run("SessionStart", extra={"source": "startup"})
            context += start.outcome.context if start is not None else []
        step = await self._run("UserPromptSubmit", extra={"prompt": prompt})
        if step is not None:
            out = step.outcome
            if out.blocked or out.stop_reason is not None:
                why = out.block_reason or out.stop_reason or "blocked by a hook"
                head = self._save()
                self.updates += [up.Error("PromptBlocked", why, False)]
                self.updates += [up.TurnEnded("blocked", 0, head)]
                return None
            context += out.context
        return "\n\n".join([prompt, *context])

    async def after(self, result: TurnResult) -> None:
        """The hooks of the turn's tool results and of its end, recorded at once."""
        s = self.session
        events = s.app.session_events(s.session_id)
        start = max(
            (i for i, e in enumerate(events) if isinstance(e, Session.UserMessageAdded)),
            default=-1,
        )
        inputs: dict[str, dict[str, Any]] = {}
        for e in events[start + 1 :]:
            if isinstance(e, Session.ToolCallRequested):
                inputs[e.tool_use_id] = dict(e.input)
            elif isinstance(e, Session.ToolCallCompleted):
                event = "PostToolUseFailure" if e.is_error else "PostToolUse"
                extra: dict[str, Any] = (
                    {"error": e.output, "is_interrupt": False}
                    if e.is_error
                    else {"tool_output": e.output, "is_error": False}
                )
                await self._run(
                    event,
                    extra=extra,
                    tool=e.name,
                    tool_input=inputs.get(e.tool_use_id, {}),
                    tool_use_id=e.tool_use_id,
                    after_call=True,
                )
        if result.reason != "cancelled":
            step = await self._run("Stop", extra={"stop_hook_active": False})
            if step is not None and step.outcome.blocked:
                said = "\n\n".join(step.outcome.feedback) or "a Stop hook asked to continue"
                # A harness's turn is over when its process exits: the user decides whether
                # to send what the hook said as the next prompt.
                self.updates.append(up.Error("StopHookBlocked", said, False))
        self._save()

    def _save(self) -> str | None:
        """Record the runs so far in the session (it exists: a turn recorded it), or drop them
        when it does not (a new session's first prompt blocked: nothing else is recorded)."""
        s = self.session
        if not self.ops or not s.exists:
            self.ops.clear()
            return None
        session = s.app.get_session(s.session_id)
        for op in self.ops:
            op(session)
        s.app.save(session)
        self.ops.clear()
        return session.head
