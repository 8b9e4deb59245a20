"""Units as messages, at a level of detail.

``full`` sends a unit as recorded, except tool outputs longer than ``tool_output_tokens``, which
are cut around a note naming where the whole output is (its blob, or the node that holds it).
``trimmed`` (older units that no longer fit in full) also cuts tool outputs to
``old_output_tokens``, long texts and long string arguments of tool calls to
``old_text_tokens``, and drops thinking blocks of earlier turns (providers ignore those).
The ``minimal`` levels only ever apply to the newest unit, so that a huge latest message still
leaves room for the rest.

A tool_use block whose result is not in the unit is dropped (a provider rejects a call without
its result); results without their call are sent as text. Renderings are cached on the unit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from coder_es.providers.types import Message
from projections.context.state import CNode, ContextState, Unit
from projections.context.tokens import MESSAGE_OVERHEAD, TokenCounter, blocks_tokens, fit_text

SUMMARY_HEADER = "[Summary of earlier turns, node {node}]\n"
_THINKING = ("thinking", "redacted_thinking")


@dataclass(frozen=True)
class Level:
    name: str
    output_cap: int
    text_cap: int | None  # None: texts and tool inputs as recorded


@dataclass(frozen=True)
class Rendered:
    messages: tuple[Message, ...]
    tokens: int
    whole_results: frozenset[int]  # result nodes sent with their whole recorded output


def _cut_note(where: str) -> Callable[[int], str]:
    return lambda k: f"\n[... {k} characters left out of the context; {where} ...]\n"


_TEXT_NOTE = _cut_note("shortened")


def _output_note(node: CNode) -> Callable[[int], str]:
    if node.output_blob:
        return _cut_note(f"the full output is blob sha256:{node.output_blob}")
    if node.label:
        return _cut_note(f"the full output is in node {node.label}")
    return _cut_note(f"the full output is in node {node.num} of this session")


def _shorten(value: Any, cap: int, count: TokenCounter) -> Any:
    if isinstance(value, str):
        return fit_text(value, cap, count, _TEXT_NOTE)
    if isinstance(value, dict):
        return {k: _shorten(v, cap, count) for k, v in value.items()}
    if isinstance(value, list):
        return [_shorten(v, cap, count) for v in value]
    return value


def _text_blocks(
    blocks: list[dict[str, Any]], level: Level, keep_thinking: bool, count: TokenCounter
) -> list[dict[str, Any]]:
    if level.text_cap is None:
        return blocks
    out: list[dict[str, Any]] = []
    for block in blocks:
        kind = block.get("type")
        if kind in _THINKING and not keep_thinking:
            continue
        if kind == "text":
            text = fit_text(str(block.get("text", "")), level.text_cap, count, _TEXT_NOTE)
            out.append({**block, "text": text})
        elif kind == "tool_use":
            out.append({**block, "input": _shorten(block.get("input", {}), level.text_cap, count)})
        else:
            out.append(block)
    return out


def _result_block(node: CNode, level: Level, count: TokenCounter) -> tuple[dict[str, Any], bool]:
    content = fit_text(node.output, level.output_cap, count, _output_note(node))
    block: dict[str, Any] = {
        "type": "tool_result",
        "tool_use_id": node.tool_use_id,
        "content": content,
    }
    if node.is_error:
        block["is_error"] = True
    return block, content is node.output and node.output_blob is None


def _message(role: str, blocks: list[dict[str, Any]]) -> Message:
    return {"role": role, "content": blocks}


def render_unit(
    state: ContextState, unit: Unit, level: Level, keep_thinking: bool, count: TokenCounter
) -> Rendered:
    key = (level, keep_thinking, count, len(unit.nodes))
    cached: Rendered | None = unit.renders.get(key)
    if cached is not None:
        return cached
    nodes = [state.nodes[n] for n in unit.nodes]
    messages: list[Message] = []
    whole: set[int] = set()
    first = nodes[0]
    if unit.kind == "user":
        blocks = _text_blocks(first.blocks, level, True, count)
        if blocks:
            messages.append(_message("user", list(blocks)))
    elif unit.kind == "summary":
        text = SUMMARY_HEADER.format(node=first.ref) + first.summary
        if level.text_cap is not None:
            text = fit_text(text, level.text_cap, count, _TEXT_NOTE)
        messages.append(_message("user", [{"type": "text", "text": text}]))
    elif unit.kind == "step":
        blocks = [
            b
            for b in first.blocks
            if not (b.get("type") == "tool_use" and str(b.get("id", "")) in unit.pending)
        ]
        blocks = _text_blocks(blocks, level, keep_thinking, count)
        if blocks:
            messages.append(_message("assistant", list(blocks)))
        results = []
        for node in nodes[1:]:
            block, is_whole = _result_block(node, level, count)
            results.append(block)
            if is_whole:
                whole.add(node.num)
        if results:
            messages.append(_message("user", results))
    else:  # results whose call is not sent: plain text
        texts = []
        for node in nodes:
            body = fit_text(node.output, level.output_cap, count, _output_note(node))
            label = f"[Result of an earlier tool call: {node.name} ({node.tool_use_id})]\n"
            texts.append({"type": "text", "text": label + body})
        messages.append(_message("user", texts))
    tokens = sum(MESSAGE_OVERHEAD + blocks_tokens(m["content"], count) for m in messages)
    rendered = Rendered(tuple(messages), tokens, frozenset(whole))
    unit.renders[key] = rendered
    return rendered
