"""A provider that plays model turns from a script, streamed like a real provider's output.

For tests, demos and offline use. Script format (JSON; ``.jsonl`` files hold one turn per line)::

    {"turns": [
      {"blocks": [{"type": "thinking", "thinking": "Look first.", "signature": "sig"},
                  {"type": "text", "text": "Reading the file."},
                  {"type": "tool_use", "name": "read", "input": {"path": "README.md"}}],
       "usage": {"input_tokens": 120, "output_tokens": 30},
       "delay_ms": 200},
      {"blocks": [{"type": "text", "text": "Done."}], "stop_reason": "end_turn"},
      {"error": {"type": "overloaded_error", "message": "Overloaded"}}
    ]}

A bare list of turns is accepted too. Per turn: ``blocks`` (normalized content blocks; a
``tool_use`` without ``id`` gets a deterministic one), ``stop_reason`` (default ``tool_use`` when
a tool is called, else ``end_turn``), ``usage`` (missing keys are 0), ``delay_ms`` (wait before
the first event, to simulate latency), or instead ``error`` (``{"type", "message"}`` with an
Anthropic error type such as ``rate_limit_error``) to make that request fail. Each request
consumes one turn; when none is left, ``ScriptExhaustedError`` says so.

With ``by_step=True`` the turn played follows from the conversation instead of the request count:
the answer to a request with K assistant messages is turn K. A session resumed in another process
(a fleet worker taking over after a crash, with a fresh provider) then continues its script
exactly where it stopped, and a turn whose response was lost is simply asked for again.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from coder_es.providers.base import Provider, Sleep
from coder_es.providers.errors import (
    ProviderConfigError,
    ScriptExhaustedError,
    error_class,
)
from coder_es.providers.types import (
    STOP_REASONS,
    Block,
    BlockComplete,
    Finish,
    MessageStart,
    ModelRequest,
    StreamEvent,
    StreamFailed,
    TextDelta,
    ThinkingDelta,
    ToolCallComplete,
    ToolCallDelta,
    ToolCallStart,
    Usage,
    UsageUpdate,
    usage_from,
)


def _gist(blocks: Sequence[Mapping[str, Any]]) -> list[Any]:
    """What identifies a response: its tool calls (name and input), else its text."""
    calls = [(b.get("name"), b.get("input")) for b in blocks if b.get("type") == "tool_use"]
    if calls:
        return calls
    return [b.get("text") for b in blocks if b.get("type") == "text"]


@dataclass(frozen=True)
class ScriptedTurn:
    blocks: list[Block] = field(default_factory=list)
    stop_reason: str = "end_turn"
    usage: Usage = field(default_factory=lambda: usage_from({}))
    delay_ms: int = 0
    error: dict[str, str] | None = None

    @classmethod
    def parse(cls, raw: Any, where: str) -> ScriptedTurn:
        if not isinstance(raw, Mapping):
            raise ProviderConfigError(f"{where}: a turn must be a JSON object, got {raw!r:.80}")
        unknown = set(raw) - {"blocks", "stop_reason", "usage", "delay_ms", "error"}
        if unknown:
            raise ProviderConfigError(f"{where}: unknown turn keys {sorted(unknown)}")
        delay = raw.get("delay_ms", 0)
        if not isinstance(delay, int | float) or delay < 0:
            raise ProviderConfigError(f"{where}: delay_ms must be a non-negative number")
        if "error" in raw:
            error = raw["error"]
            if not isinstance(error, Mapping) or not isinstance(error.get("message"), str):
                raise ProviderConfigError(f"{where}: error needs a 'message' (and a 'type')")
            return cls(
                delay_ms=int(delay),
                error={"type": str(error.get("type", "api_error")), "message": error["message"]},
            )
        blocks = raw.get("blocks")
        if not isinstance(blocks, list) or not blocks:
            raise ProviderConfigError(f"{where}: 'blocks' must be a non-empty list of blocks")
        checked: list[Block] = []
        for n, block in enumerate(blocks):
            checked.append(_check_block(block, f"{where}.blocks[{n}]"))
        has_tool = any(b["type"] == "tool_use" for b in checked)
        stop = raw.get("stop_reason", "tool_use" if has_tool else "end_turn")
        if stop not in STOP_REASONS:
            raise ProviderConfigError(
                f"{where}: stop_reason {stop!r} is not one of {sorted(STOP_REASONS)}"
            )
        usage = raw.get("usage", {})
        if not isinstance(usage, Mapping):
            raise ProviderConfigError(f"{where}: usage must be an object")
        return cls(blocks=checked, stop_reason=stop, usage=usage_from(usage), delay_ms=int(delay))


def _check_block(block: Any, where: str) -> Block:
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise ProviderConfigError(f"{where}: a block must be an object with a 'type'")
    kind = block["type"]
    required: dict[str, tuple[str, type]] = {
        "text": ("text", str),
        "thinking": ("thinking", str),
        "tool_use": ("name", str),
    }
    if kind in required:
        key, typ = required[kind]
        if not isinstance(block.get(key), typ):
            raise ProviderConfigError(f"{where}: a {kind} block needs a string '{key}'")
    if kind == "tool_use" and not isinstance(block.get("input", {}), dict):
        raise ProviderConfigError(f"{where}: tool_use 'input' must be an object")
    return dict(block)


def load_script(path: str | Path) -> list[ScriptedTurn]:
    """Read and check a script file; errors name the file and the turn."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ProviderConfigError(f"cannot read script {p}: {e.strerror or e}") from e
    raw: Any
    try:
        if p.suffix == ".jsonl":
            raw = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            raw = json.loads(text)
    except ValueError as e:
        raise ProviderConfigError(f"script {p} is not valid JSON: {e}") from e
    if isinstance(raw, Mapping):
        raw = raw.get("turns")
    if not isinstance(raw, list):
        raise ProviderConfigError(f'script {p}: expected a list of turns or {{"turns": [...]}}')
    return [ScriptedTurn.parse(t, f"{p.name}: turn {i}") for i, t in enumerate(raw)]


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


class ScriptedProvider(Provider):
    """Plays ``turns`` in order, one per request (or by step, see the module docstring).
    ``requests`` keeps every request received."""

    name: ClassVar[str] = "scripted"

    def __init__(
        self,
        turns: Sequence[ScriptedTurn | Mapping[str, Any]],
        *,
        model: str = "scripted",
        source: str = "in-memory script",
        sleep: Sleep = asyncio.sleep,
        chunk_chars: int = 16,
        by_step: bool = False,
    ) -> None:
        self.model = model
        self.source = source
        self.turns = [
            t if isinstance(t, ScriptedTurn) else ScriptedTurn.parse(t, f"{source}: turn {i}")
            for i, t in enumerate(turns)
        ]
        self.sleep = sleep
        self.chunk_chars = max(1, chunk_chars)
        self.by_step = by_step
        # Tool call ids must be unique in a conversation: numbered by turn and block.
        self._id_prefix = "toolu_step" if by_step else "toolu_scripted_"
        self.requests: list[ModelRequest] = []
        self._next = 0

    @classmethod
    def from_file(cls, path: str | Path, **kwargs: Any) -> ScriptedProvider:
        return cls(load_script(path), source=str(path), **kwargs)

    def continue_after(self, played: Sequence[Sequence[Mapping[str, Any]]]) -> None:
        """Resuming an interrupted turn whose responses so far (their blocks, in order) were
        ``played``: when this script begins with them (the same tool calls, or the same text),
        it is the script that played them, and it goes on after them instead of playing them
        again (their tool calls completed). A script that holds only what is left is played
        from its start."""
        if not played or len(played) >= len(self.turns) or self._next:
            return
        for turn, blocks in zip(self.turns, played, strict=False):
            if _gist(turn.blocks) != _gist(blocks):
                return
        self._next = len(played)

    @property
    def remaining(self) -> int:
        return len(self.turns) - self._next

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self.requests.append(request)
        if self.by_step:
            number = sum(1 for m in request.messages if m.get("role") == "assistant")
            why = f"; the conversation already has {number} model response(s), so this request"
        else:
            number = self._next
            why = f" and all were played; request {number + 1}"
        if number >= len(self.turns):
            error = ScriptExhaustedError(
                f"{self.source} has {len(self.turns)} turn(s){why} has no scripted answer",
                provider=self.name,
            )
            yield StreamFailed(error)
            raise error
        if not self.by_step:
            self._next += 1
        turn = self.turns[number]
        if turn.delay_ms:
            await self.sleep(turn.delay_ms / 1000)
        if turn.error is not None:
            cls = error_class(None, turn.error["type"], turn.error["message"])
            failure = cls(turn.error["message"], provider=self.name, error_type=turn.error["type"])
            yield StreamFailed(failure)
            raise failure
        usage = dict(turn.usage)
        yield MessageStart(
            model=request.model or self.model,
            message_id=f"msg_scripted_{number}",
            usage={**usage, "output_tokens": 0},
        )
        size = self.chunk_chars
        for index, block in enumerate(turn.blocks):
            kind = block["type"]
            if kind == "text":
                for piece in _pieces(block["text"], size):
                    yield TextDelta(index, piece)
                yield BlockComplete(index, dict(block))
            elif kind == "thinking":
                for piece in _pieces(block["thinking"], size):
                    yield ThinkingDelta(index, piece)
                signature = block.get("signature", "")
                if signature:
                    yield ThinkingDelta(index, "", signature)
                yield BlockComplete(index, {**block, "signature": signature})
            elif kind == "tool_use":
                call_id = block.get("id") or f"{self._id_prefix}{number}_{index}"
                yield ToolCallStart(index, call_id, block["name"])
                arguments = block.get("input", {})
                for piece in _pieces(json.dumps(arguments), size):
                    yield ToolCallDelta(index, piece)
                yield ToolCallComplete(index, call_id, block["name"], dict(arguments))
            else:
                yield BlockComplete(index, dict(block))
        yield UsageUpdate(usage)
        yield Finish(stop_reason=turn.stop_reason, usage=usage, raw_stop_reason=turn.stop_reason)
