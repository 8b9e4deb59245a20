"""Text and thinking deltas gathered into whole blocks, for wire formats without block boundaries.

Chat Completions and Ollama stream bare text and reasoning fragments: each kind becomes one block,
numbered on its first fragment from the same counter as the tool calls, so block indices follow the
order in which content first appeared on the wire.
"""

from __future__ import annotations

from coder_es.providers.types import BlockComplete, StreamEvent, TextDelta, ThinkingDelta


class DeltaBlocks:
    """The block counter of one response, plus its text and thinking blocks as they grow."""

    __slots__ = ("_next_index", "_text", "_text_index", "_think", "_think_index")

    def __init__(self) -> None:
        self._next_index = 0
        self._text_index: int | None = None
        self._text: list[str] = []
        self._think_index: int | None = None
        self._think: list[str] = []

    def new_index(self) -> int:
        index = self._next_index
        self._next_index += 1
        return index

    def text(self, delta: str, out: list[StreamEvent]) -> None:
        index = self._text_index
        if index is None:
            index = self._text_index = self.new_index()
        self._text.append(delta)
        out.append(TextDelta(index, delta))

    def thinking(self, delta: str, out: list[StreamEvent]) -> None:
        index = self._think_index
        if index is None:
            index = self._think_index = self.new_index()
        self._think.append(delta)
        out.append(ThinkingDelta(index, delta))

    def complete(self) -> list[BlockComplete]:
        """The finished blocks in index order. Thinking is unsigned: these formats carry none."""
        blocks: list[BlockComplete] = []
        if self._think_index is not None:
            block = {"type": "thinking", "thinking": "".join(self._think), "signature": ""}
            blocks.append(BlockComplete(self._think_index, block))
        if self._text_index is not None:
            blocks.append(
                BlockComplete(self._text_index, {"type": "text", "text": "".join(self._text)})
            )
        blocks.sort(key=lambda b: b.index)
        return blocks
