"""``OwnLoopReplay``: replay a session your own loop recorded (``OwnLoop``), offline, in a test.

``replay_cassette`` replays coder_es's own loop; a loop of yours is replayed by driving it with
the recording instead of a model and your tools, and checking that it reports the same steps::

    replay = OwnLoopReplay(load_cassette("my-loop.cassette.jsonl"))
    # your loop, with its model client answering replay.next_response() and its tools
    # answering replay.result_of(call_id), reports to ``replay`` as it would to an OwnLoop:
    replay.user("make it say bye"); replay.model(...); replay.tool_result(...)
    replay.finish()   # every recorded step was replayed

The first step that differs raises ``ReplayMismatch`` (a ``CoderESError``) naming the step, what
was recorded and what the loop did. Compared: user messages, model responses (text and tool
calls, by name and input), permission decisions, tool results (output and error flag), in order;
not compared: usage, thinking, durations, files (the disk is the test's). Recorded
content holds secrets as their redaction markers.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coder_es.errors import UsageError
from coder_es.sdk.own_loop import ToolUse
from replay.cassette import Cassette, RecordedEvent
from replay.report import ReplayMismatch

_STEPS = ("UserMessageAdded", "ModelResponded", "PermissionDecided", "ToolCallCompleted")


@dataclass(frozen=True)
class RecordedResponse:
    """A model response as recorded: what a fake model client of your loop returns."""

    text: str
    tool_calls: tuple[ToolUse, ...]
    stop_reason: str
    blocks: tuple[Mapping[str, Any], ...]


def _text(blocks: Iterable[Mapping[str, Any]]) -> str:
    return "".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")


def _calls(blocks: Iterable[Mapping[str, Any]]) -> tuple[ToolUse, ...]:
    return tuple(
        ToolUse(str(b["id"]), str(b["name"]), dict(b.get("input") or {}))
        for b in blocks
        if b.get("type") == "tool_use"
    )


class OwnLoopReplay:
    """The recorded steps of one session, checked one by one (see the module docstring)."""

    def __init__(self, cassette: Cassette) -> None:
        self.cassette = cassette
        self._steps: list[RecordedEvent] = [e for e in cassette.events if e.kind in _STEPS]
        self._next = 0
        self._responses = [e for e in self._steps if e.kind == "ModelResponded"]
        self._served = 0
        self._results = {
            str(e.fields["tool_use_id"]): str(e.fields["output"])
            for e in self._steps
            if e.kind == "ToolCallCompleted"
        }

    # ------------------------------------------------------------------ the fakes

    def next_response(self) -> RecordedResponse:
        """The next recorded model response, in order (your model client's answer)."""
        if self._served >= len(self._responses):
            raise ReplayMismatch(
                "model",
                "ModelResponded",
                None,
                "a request",
                "the loop asked the model more "
                f"often than recorded ({len(self._responses)} response(s))",
            )
        blocks = tuple(self._responses[self._served].fields["blocks"])
        stop = str(self._responses[self._served].fields["stop_reason"])
        self._served += 1
        return RecordedResponse(_text(blocks), _calls(blocks), stop, blocks)

    def result_of(self, tool_use_id: str) -> str:
        """The recorded output of a tool call (your tool's answer)."""
        if tool_use_id not in self._results:
            raise ReplayMismatch(
                "tool",
                "ToolCallCompleted",
                None,
                tool_use_id,
                f"the recording has no result for tool call {tool_use_id!r}",
            )
        return self._results[tool_use_id]

    # ------------------------------------------------------------------ the checks

    def _check(self, kind: str, actual: Mapping[str, Any], recorded: Mapping[str, Any]) -> None:
        if dict(actual) != dict(recorded):
            raise ReplayMismatch(
                "step",
                kind,
                dict(recorded),
                dict(actual),
                f"step {self._next} ({kind}) differs: recorded "
                f"{json.dumps(recorded, sort_keys=True, default=str)}, the loop reported "
                f"{json.dumps(actual, sort_keys=True, default=str)}",
            )

    def _take(self, kind: str) -> RecordedEvent:
        if self._next >= len(self._steps):
            raise ReplayMismatch(
                "step", kind, None, kind, f"the loop reported a {kind} after the recording ended"
            )
        event = self._steps[self._next]
        if event.kind != kind:
            raise ReplayMismatch(
                "step",
                kind,
                event.kind,
                kind,
                f"step {self._next}: the recording has {event.kind} here, the loop reported {kind}",
            )
        self._next += 1
        return event

    def user(self, text: str) -> None:
        recorded = self._take("UserMessageAdded").fields["content"]
        self._check("UserMessageAdded", {"text": text}, {"text": _text(recorded)})

    def model(
        self,
        text: str = "",
        *,
        tool_calls: Sequence[ToolUse] = (),
        thinking: str | None = None,
        stop_reason: str | None = None,
        usage: Mapping[str, int] | None = None,
        model: str | None = None,
    ) -> None:
        del thinking, usage, model  # not compared: they vary with the model, not the loop
        fields = self._take("ModelResponded").fields
        blocks = fields["blocks"]
        self._check(
            "ModelResponded",
            {
                "text": text,
                "tool_calls": [[c.id, c.name, dict(c.input)] for c in tool_calls],
                "stop_reason": stop_reason or ("tool_use" if tool_calls else "end_turn"),
            },
            {
                "text": _text(blocks),
                "tool_calls": [[c.id, c.name, dict(c.input)] for c in _calls(blocks)],
                "stop_reason": fields["stop_reason"],
            },
        )

    def permission(
        self, tool_use_id: str, allowed: bool, *, by: str = "user", reason: str | None = None
    ) -> None:
        del reason
        fields = self._take("PermissionDecided").fields
        self._check(
            "PermissionDecided",
            {"tool_use_id": tool_use_id, "decision": "allow" if allowed else "deny", "by": by},
            {
                "tool_use_id": fields["tool_use_id"],
                "decision": fields["decision"],
                "by": fields["decided_by"],
            },
        )

    def observe(self, *paths: str) -> None:
        """Not compared (what the disk held is the test's, not the loop's)."""
        del paths

    def tool_result(
        self,
        tool_use_id: str,
        output: str,
        *,
        is_error: bool = False,
        duration_ms: int = 0,
        files: Iterable[str] = (),
    ) -> None:
        del duration_ms, files  # the disk is the test's (a scratch one), not the loop's
        fields = self._take("ToolCallCompleted").fields
        self._check(
            "ToolCallCompleted",
            {
                "tool_use_id": tool_use_id,
                "output": output,
                "is_error": is_error,
            },
            {
                "tool_use_id": fields["tool_use_id"],
                "output": fields["output"],
                "is_error": fields["is_error"],
            },
        )

    def finish(self) -> None:
        """Every recorded step was replayed (a loop that stops early diverges too)."""
        if self._next < len(self._steps):
            left = self._steps[self._next]
            raise ReplayMismatch(
                "step",
                left.kind,
                left.kind,
                None,
                f"the loop stopped after {self._next} of {len(self._steps)} recorded steps; "
                f"next recorded: {left.kind}",
            )

    def __enter__(self) -> OwnLoopReplay:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.finish()


def replay_own_loop(cassette: str | Path | Cassette) -> OwnLoopReplay:
    """An ``OwnLoopReplay`` of a cassette (a path, or a loaded one)."""
    from replay.cassette import load_cassette

    if isinstance(cassette, str | Path):
        return OwnLoopReplay(load_cassette(cassette))
    if not isinstance(cassette, Cassette):
        raise UsageError("replay_own_loop takes a cassette or its path")
    return OwnLoopReplay(cassette)
