"""The deterministic fallback summarizer: what happened, one short line at a time.

When no model-written summary covers older turns (or the model cannot be asked), the context
keeps a trace of them made only from the events: the first line of each user ask, the tool
calls made (tool and its main argument, failures marked), the files changed, and final answers.
Earlier compaction summaries are carried over as they are (shortened). The same events always
give the same text.
"""

from __future__ import annotations

from collections.abc import Sequence

from projections.context.state import CNode, ContextState, Unit
from projections.context.tokens import TokenCounter, fit_text

ASK_CHARS = 200
ANSWER_CHARS = 240
ARG_CHARS = 80
MAX_CHANGED = 8
# Tool input keys that name what a call is about, in the order they are looked for.
_MAIN_ARGS = ("path", "command", "pattern", "file_path", "url", "query")


def _first_line(text: str, limit: int) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line:
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


def _text_of(node: CNode) -> str:
    return "\n".join(str(b.get("text", "")) for b in node.blocks if b.get("type") == "text")


def _call(block: dict[str, object]) -> str:
    name = str(block.get("name", "?"))
    raw = block.get("input")
    args = raw if isinstance(raw, dict) else {}
    for key in _MAIN_ARGS:
        value = args.get(key)
        if isinstance(value, str) and value:
            return f"{name} {_first_line(value, ARG_CHARS)}"
    return name


def unit_lines(state: ContextState, unit: Unit) -> list[str]:
    """The fallback-summary lines of one unit (cached on the unit)."""
    if unit.digest is not None:
        return unit.digest
    nodes = [state.nodes[n] for n in unit.nodes]
    first = nodes[0]
    lines: list[str] = []
    if unit.kind == "user":
        ask = _first_line(_text_of(first), ASK_CHARS)
        lines.append(f"- [{first.ref}] User: {ask or '(no text)'}")
    elif unit.kind == "summary":
        text = _first_line(first.summary, ANSWER_CHARS)
        lines.append(f"- [{first.ref}] Earlier summary: {text}")
    else:
        results = {n.tool_use_id: n for n in nodes if n.kind != "assistant"}
        if unit.kind == "step":
            calls = []
            for block in first.blocks:
                if block.get("type") != "tool_use":
                    continue
                result = results.get(str(block.get("id", "")))
                failed = result is not None and result.is_error
                calls.append(_call(block) + (" (failed)" if failed else ""))
            if calls:
                lines.append(f"- [{first.ref}] Tools: " + "; ".join(calls))
            else:
                answer = _first_line(_text_of(first), ANSWER_CHARS)
                if answer:
                    lines.append(f"- [{first.ref}] Assistant: {answer}")
        else:
            names = ", ".join(n.name or "?" for n in nodes)
            lines.append(f"- [{first.ref}] Tool results: {names}")
        changed: list[str] = []
        for n in nodes:
            changed.extend(p for p in n.changed if p not in changed)
        if changed:
            more = len(changed) - MAX_CHANGED
            shown = ", ".join(changed[:MAX_CHANGED]) + (f" (+{more} more)" if more > 0 else "")
            lines.append(f"  changed: {shown}")
    unit.digest = lines
    return lines


def summary_entry(state: ContextState, unit: Unit) -> str:
    """A unit as it appears in a condensed history: a summary whole, anything else as lines."""
    if unit.kind == "summary":
        node = state.nodes[unit.nodes[0]]
        return f"[Summary of earlier turns, node {node.ref}]\n{node.summary.strip()}"
    return "\n".join(unit_lines(state, unit))


def condense(
    state: ContextState,
    units: Sequence[Unit],
    max_tokens: int,
    count: TokenCounter,
    header: str,
) -> tuple[str, int]:
    """``header`` and the entries of ``units`` that fit ``max_tokens``, newest kept first.

    Returns the text (chronological) and how many units it shows. An entry too long for the
    room left is shortened when at least a few dozen tokens remain, else it and everything older
    is left out (the header says how many units are not shown).
    """
    room = max_tokens - count(header) - 12  # 12: the "(N earlier ... not shown)" line
    if room < 0:
        return "", 0
    entries: list[str] = []
    for unit in reversed(units):
        entry = summary_entry(state, unit)
        cost = count(entry) + 1
        if cost > room:
            if room >= 48:
                entries.append(
                    fit_text(entry, room - 1, count, lambda k: f"\n[... {k} chars cut ...]\n")
                )
            break
        entries.append(entry)
        room -= cost
    shown = len(entries)
    entries.reverse()
    missing = len(units) - shown
    head = header if not missing else f"{header}\n({missing} earlier parts not shown)"
    text = "\n".join([head, *entries])
    # A counter that is not additive over lines may disagree: drop the oldest until it fits.
    while entries and count(text) > max_tokens:
        entries.pop(0)
        shown -= 1
        head = f"{header}\n({len(units) - shown} earlier parts not shown)"
        text = "\n".join([head, *entries])
    if count(text) > max_tokens:
        return "", 0
    return text, shown


def fallback_summary(
    state: ContextState, units: Sequence[Unit], max_tokens: int, count: TokenCounter
) -> str:
    """A summary of ``units`` made from the events alone (see the module docstring)."""
    first = state.nodes[units[0].nodes[0]].ref if units else 0
    last = state.nodes[units[-1].nodes[-1]].ref if units else 0
    header = f"Condensed history of nodes {first}-{last} (made from the recorded events):"
    text, _ = condense(state, units, max_tokens, count, header)
    return text
