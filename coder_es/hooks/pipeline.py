"""The pipeline: the hooks of an event run one after the other, in configuration order.

Deterministic by construction, where Claude Code and Codex run matching hooks side by side and
the last to finish wins a rewrite:

- matching hooks (commands and plugins alike) run in configuration order, one at a time;
- each sees the tool input as rewritten by the hooks before it (``updatedInput`` chains), so
  two hooks rewriting the same field compose: the second rewrites the first's result;
- permission decisions combine by strength, deny > defer > ask > allow, whatever the order;
- added context and messages for the model are kept in configuration order.

Every run becomes one ``HookRan`` record (``records``), built here and recorded by the loop
before anything acts on it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coder_es.hooks.answer import Ran, combine, read_answer
from coder_es.hooks.dialect import (
    claude_tool_name,
    from_claude_input,
    to_claude_input,
    tool_response,
)
from coder_es.hooks.spec import HookSpec, hooks_for

RunHook = Callable[[HookSpec, dict[str, Any]], Awaitable[Ran]]


@dataclass
class Outcome:
    """What the hooks of one event decided, together."""

    records: list[dict[str, Any]] = field(default_factory=list)
    decision: str | None = None  # allow / ask / defer / deny (the strongest)
    reason: str | None = None  # the reason of the hook whose decision stands
    decided_by: str | None = None  # that hook's identity
    updated_input: dict[str, Any] | None = None  # the input after every rewrite (our fields)
    context: list[str] = field(default_factory=list)  # for the model, in order
    feedback: list[str] = field(default_factory=list)  # for the model, in order
    blocked: bool = False
    block_reason: str | None = None
    stop_reason: str | None = None  # a hook answered continue: false
    messages: list[str] = field(default_factory=list)  # for the user only
    files_changed: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ran(self) -> bool:
        return bool(self.records)


@dataclass(frozen=True)
class EventInput:
    """The event a pipeline runs for. ``tool``/``tool_input`` in our names and fields."""

    event: str
    session_id: str
    root: Path
    tool: str | None = None
    tool_input: dict[str, Any] | None = None
    tool_use_id: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Event fields besides the common ones (``prompt``, ``stop_hook_active``, ``source``...).
    ``tool_output`` / ``is_error`` become ``tool_response``; ``error`` stays."""


def payload_for(
    spec: HookSpec, ev: EventInput, tool_input: dict[str, Any] | None
) -> dict[str, Any]:
    """The JSON a hook gets on stdin (Claude Code's fields; its tool names for its dialect)."""
    claude = spec.dialect == "claude-code"
    payload: dict[str, Any] = {
        "session_id": ev.session_id,
        "transcript_path": "",
        "cwd": str(ev.root),
        "permission_mode": "default",
        "hook_event_name": ev.event,
    }
    if ev.tool is not None:
        given = dict(tool_input or {})
        payload["tool_name"] = claude_tool_name(ev.tool) if claude else ev.tool
        payload["tool_input"] = to_claude_input(ev.tool, given, ev.root) if claude else given
        payload["tool_use_id"] = ev.tool_use_id
    extra = dict(ev.extra)
    if "tool_output" in extra:
        output, is_error = str(extra.pop("tool_output")), bool(extra.pop("is_error", False))
        payload["tool_response"] = tool_response(
            ev.tool or "", payload.get("tool_input", {}), output, is_error
        )
    payload.update(extra)
    return payload


async def run_event(specs: tuple[HookSpec, ...], ev: EventInput, run: RunHook) -> Outcome:
    """Run the hooks of ``ev`` (those whose matcher takes its tool), in order."""
    out = Outcome()
    current = dict(ev.tool_input) if ev.tool_input is not None else None
    for spec in hooks_for(specs, ev.event, ev.tool):
        payload = payload_for(spec, ev, current)
        ran = await run(spec, payload)
        effect = read_answer(ev.event, ran, spec.on_failure)
        rewritten = effect.pop("updated_input", None)
        if isinstance(rewritten, dict) and ev.tool is not None:
            if spec.dialect == "claude-code":
                rewritten = from_claude_input(ev.tool, rewritten, ev.root)
            if rewritten != current:
                current = rewritten
                out.updated_input = dict(rewritten)
                effect["updated_input"] = dict(rewritten)
        if ran.files_changed:
            effect["files_changed"] = [dict(c) for c in ran.files_changed]
            out.files_changed += [{**c, "by": spec.identity} for c in ran.files_changed]
        _fold(out, spec, effect)
        out.records.append(
            {
                "hook_event": ev.event,
                "hook": spec.identity,
                "digest": spec.digest,
                "tool_use_id": ev.tool_use_id,
                "input": payload,
                "exit_code": ran.exit_code,
                "output": ran.stdout,
                "stderr": ran.stderr,
                "duration_ms": ran.duration_ms,
                "effect": effect,
            }
        )
    return out


def _fold(out: Outcome, spec: HookSpec, effect: dict[str, Any]) -> None:
    decision = effect.get("decision")
    if decision is not None:
        stronger = combine(out.decision, decision)
        if stronger != out.decision:
            out.decision, out.reason, out.decided_by = stronger, effect.get("reason"), spec.identity
    if effect.get("context"):
        out.context.append(str(effect["context"]))
    if effect.get("feedback"):
        out.feedback.append(str(effect["feedback"]))
    if effect.get("blocked") and not out.blocked:
        out.blocked = True
        out.block_reason = effect.get("reason") or effect.get("feedback")
    if effect.get("continue") is False and out.stop_reason is None:
        out.stop_reason = str(effect.get("stop_reason"))
    for key in ("system_message", "message", "failed"):
        if effect.get(key):
            out.messages.append(f"{spec.identity}: {effect[key]}")


def model_note(texts: list[str]) -> str:
    """The hooks' words for the model, as added after a tool's output (replay strips the same
    suffix from a recorded output before its hooks are served again)."""
    return "".join(f"\n\n[hook] {t}" for t in texts)


def notes_of(effects: list[dict[str, Any]]) -> list[str]:
    """The texts ``model_note`` adds for the recorded effects of one call's post-tool hooks."""
    out: list[str] = []
    for effect in effects:
        for key in ("feedback", "context"):
            if effect.get(key):
                out.append(str(effect[key]))
    return out


def tool_part(
    output: str, changes: list[dict[str, Any]], effects: list[dict[str, Any]]
) -> tuple[str, list[dict[str, Any]]]:
    """A recorded call result without what its post-tool hooks added (their notes after the
    output, their file changes): what the tool itself produced, for a replay that serves the
    hooks' runs again on top of it."""
    note = model_note(notes_of(effects))
    if note and output.endswith(note):
        output = output[: -len(note)]
    first_before: dict[str, Any] = {}
    for effect in effects:
        for c in effect.get("files_changed") or []:
            first_before.setdefault(str(c["path"]), c.get("before"))
    own: list[dict[str, Any]] = []
    for c in changes:
        if "by" not in c:
            own.append(c)
            continue
        hook_before = first_before.get(str(c["path"]))
        if c.get("before") != hook_before:  # the tool changed it first
            own.append({"path": c["path"], "before": c.get("before"), "after": hook_before})
    return output, own
