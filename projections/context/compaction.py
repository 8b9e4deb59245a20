"""Deciding what to compact: which nodes a new summary covers, and the fallback summary text.

``plan_compaction`` is called by the loop when the provider says the context is too long (or
when ``BuiltContext.needs_compaction``); the loop records the plan as a ``ContextCompacted``
event and builds the request again. The most recent turns are never covered: everything before
the ``keep_turns`` newest user messages is. When the path has no more turns than that (one long
agentic turn), the turn's user messages stay and the model steps before the ``keep_steps``
newest ones are covered instead. Units are covered whole (a model response with all its tool
results), so no tool_use / tool_result pair is ever split. Earlier summaries still shown are
covered too: the new summary carries them over, so at most one summary stands for the past.

The summary is the deterministic fallback (``summarize``); a loop that asks the model for a
summary sends it ``compaction_transcript`` and records the answer with ``produced_by="model"``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from coder_es.domain.session import NodeId
from projections.context.builder import HEAD
from projections.context.state import ContextState, Unit
from projections.context.summarize import fallback_summary
from projections.context.tokens import TokenCounter, estimate_tokens, fit_text

DEFAULT_SUMMARY_TOKENS = 2_000


@dataclass(frozen=True)
class CompactionPlan:
    covers: tuple[NodeId, ...]  # path order
    summary: str
    produced_by: str
    kept_from: NodeId | None  # the first node after the covered part that stays as it is
    covered_units: int


def _state(source: ContextState | Iterable[Any]) -> ContextState:
    return source if isinstance(source, ContextState) else ContextState.from_events(source)


def _covered_units(units: list[Unit], keep_turns: int, keep_steps: int) -> list[Unit]:
    users = [i for i, u in enumerate(units) if u.kind == "user"]
    if len(users) > keep_turns:
        cut = users[len(users) - keep_turns] if keep_turns > 0 else len(units)
        return units[:cut]
    end = max(0, len(units) - keep_steps)
    return [u for u in units[:end] if u.kind != "user"]


def plan_compaction(
    source: ContextState | Iterable[Any],
    head: NodeId | None = HEAD,
    *,
    keep_turns: int = 2,
    keep_steps: int = 4,
    max_summary_tokens: int = DEFAULT_SUMMARY_TOKENS,
    counter: TokenCounter = estimate_tokens,
) -> CompactionPlan | None:
    """What to compact on the path to ``head``, or None when nothing can be (see above)."""
    if keep_turns < 0 or keep_steps < 0 or max_summary_tokens < 64:
        msg = "keep_turns and keep_steps must be >= 0 and max_summary_tokens >= 64"
        raise ValueError(msg)
    state = _state(source)
    node = state.head if head is HEAD else head
    view = state.view(node)
    units = view.units
    # Nodes inherited from a forked-from session (numbered below 1) belong to that session: a
    # compaction here can only cover this session's own nodes.
    covered = [u for u in _covered_units(units, keep_turns, keep_steps) if min(u.nodes) > 0]
    if not covered or all(u.kind == "summary" for u in covered):
        return None  # nothing new to fold (re-summarizing a lone summary gains nothing)
    covers = [str(n) for u in covered for n in u.nodes]
    last_covered = covered[-1]
    index = next(i for i, u in enumerate(units) if u is last_covered)
    kept = next((str(u.nodes[0]) for u in units[index + 1 :]), None)
    summary = fallback_summary(state, covered, max_summary_tokens, counter)
    return CompactionPlan(tuple(covers), summary, "fallback", kept, len(covered))


def compaction_transcript(
    source: ContextState | Iterable[Any],
    covers: Iterable[NodeId],
    *,
    max_tokens: int = 50_000,
    counter: TokenCounter = estimate_tokens,
) -> str:
    """The covered nodes as plain text, for asking a model to write the summary."""
    state = _state(source)
    lines: list[str] = []
    per_output = max(64, max_tokens // 50)
    for ref in covers:
        node = state.nodes.get(int(ref)) if str(ref).isdigit() else None
        if node is None:
            continue
        if node.kind == "summary":
            lines.append(f"[{node.ref}] Earlier summary:\n{node.summary}")
        elif node.kind == "tool_result":
            body = fit_text(node.output, per_output, counter, lambda k: f"\n[... {k} chars ...]\n")
            flag = " (error)" if node.is_error else ""
            lines.append(f"[{node.ref}] Result of {node.name}{flag}:\n{body}")
        else:
            who = "User" if node.kind == "user" else "Assistant"
            for block in node.blocks:
                kind = block.get("type")
                if kind == "text":
                    lines.append(f"[{node.ref}] {who}: {block.get('text', '')}")
                elif kind == "tool_use":
                    args = json.dumps(block.get("input", {}), sort_keys=True, ensure_ascii=False)
                    lines.append(f"[{node.ref}] Tool call {block.get('name')}: {args}")
    text = "\n\n".join(lines)
    return fit_text(text, max_tokens, counter, lambda k: f"\n[... {k} chars left out ...]\n")
