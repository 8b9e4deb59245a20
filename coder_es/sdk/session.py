"""``Session``: one open session of a ``Store``, run turn by turn.

``send`` streams a turn's updates (``coder_es.agent.updates``); ``run`` drives a turn to its
end and returns a ``TurnResult``. A ``PermissionRequired`` update waits for ``answer`` unless the
turn was given an answerer (a callable from the question to a ``PermissionAnswer``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING

from coder_es.agent import updates as up
from coder_es.permissions.policy import PermissionAnswer
from coder_es.providers.images import ImageInput

if TYPE_CHECKING:
    from coder_es.service.api import SessionHandle

Answerer = Callable[[up.PermissionRequired], Awaitable[PermissionAnswer]]
"""Answers a permission question of a turn (``Session.send(answer=...)``)."""


@dataclass(frozen=True)
class TurnResult:
    """How a turn ended (``Session.run``)."""

    session_id: str
    reason: str
    """A model stop reason (``end_turn``), or ``max_steps``, ``cancelled``, ``error``,
    ``waiting`` (questions were parked for ``coder-es approve``)."""
    steps: int
    head: str | None
    """The node the session's head is at after the turn."""
    text: str
    """The text of the turn's last model response."""
    updates: tuple[up.Update, ...]
    """Every update of the turn, in order."""
    error: str | None = None

    @property
    def ok(self) -> bool:
        """The turn ended because the model was done (not an error, a limit or a cancel)."""
        return self.error is None and self.reason in ("end_turn", "stop_sequence")


async def reject_asks(question: up.PermissionRequired) -> PermissionAnswer:
    """The default answerer of ``Session.run``: nobody is there to ask, so a call that needs
    permission is refused and the model is told which rule would allow it."""
    return PermissionAnswer.reject(
        f"{question.tool} needs permission ({question.reason}) and nobody is asked; "
        f"a rule allow('{question.tool}:{question.suggested_pattern}') would allow it",
        decided_by="client",
    )


async def allow_asks(question: up.PermissionRequired) -> PermissionAnswer:
    """An answerer that allows every call a rule asks about, once (deny rules still deny)."""
    del question
    return PermissionAnswer.allow_once(decided_by="user")


class Session:
    """An open session: send messages, stream their turns, answer questions, close.

    Use it as an async context manager (``async with await store.start(...) as session``) or
    call ``close``. One turn runs at a time; the session's lease (one writer per session) is
    held while a turn runs.
    """

    def __init__(self, handle: SessionHandle, on_close: Callable[[Session], None]) -> None:
        self._handle = handle
        self._on_close = on_close
        self._closed = False

    @property
    def id(self) -> str:
        return self._handle.id

    @property
    def head(self) -> str | None:
        """The node the session's head is at (``None``: before the first message)."""
        return self._handle.loop.session.head

    @property
    def running(self) -> bool:
        return self._handle.running

    @property
    def pending_questions(self) -> list[str]:
        """The tool calls whose permission question waits for ``answer``."""
        return self._handle.pending_questions

    def send(
        self, text: str, *, images: Sequence[ImageInput] = (), answer: Answerer | None = None
    ) -> AsyncIterator[up.Update]:
        """Send a user message; iterate over the updates of the turn it starts (the last is a
        ``TurnEnded``). Without ``answer`` a ``PermissionRequired`` waits for ``answer()``."""
        return self._handle.send(text, images=images, answerer=answer)

    def resume(self, *, answer: Answerer | None = None) -> AsyncIterator[up.Update]:
        """Continue a turn that was interrupted (a crash, a parked question now answered)."""
        return self._handle.resume(answerer=answer)

    async def run(self, text: str, *, answer: Answerer | None = reject_asks) -> TurnResult:
        """Send ``text`` and run the turn to its end. By default a call that needs permission
        is refused (``reject_asks``); pass ``answer=allow_asks`` or an answerer of your own."""
        return await self._collect(self.send(text, answer=answer))

    async def _collect(self, stream: AsyncIterator[up.Update]) -> TurnResult:
        seen: list[up.Update] = []
        text = ""
        async for update in stream:
            seen.append(update)
            if isinstance(update, up.ModelResponse):
                text = update.text
        outcome = self._handle.outcome
        ended = next((u for u in reversed(seen) if isinstance(u, up.TurnEnded)), None)
        return TurnResult(
            session_id=self.id,
            reason=outcome.reason if outcome else (ended.reason if ended else "cancelled"),
            steps=outcome.steps if outcome else (ended.steps if ended else 0),
            head=outcome.head if outcome else self.head,
            text=text,
            updates=tuple(seen),
            error=outcome.error if outcome else None,
        )

    async def answer(self, tool_use_id: str, answer: PermissionAnswer | bool) -> None:
        """Answer the question of a running turn: ``True`` allows the call once, ``False``
        refuses it, or a ``PermissionAnswer`` (``allow_always`` records a rule)."""
        if isinstance(answer, bool):
            answer = (
                PermissionAnswer.allow_once(decided_by="user")
                if answer
                else PermissionAnswer.reject("refused by the user", decided_by="user")
            )
        await self._handle.answer(tool_use_id, answer)

    def cancel(self, reason: str = "cancelled by the user") -> bool:
        """Cancel the running turn (from another task or a signal handler)."""
        return self._handle.cancel(reason)

    def reload(self) -> None:
        """Read the session again after its head moved (``Store.checkout``/``rewind`` do it)."""
        if not self._closed:
            self._handle.reload()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self._handle.close()
        finally:
            self._on_close(self)

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
