"""A hook's answer, read the way Claude Code reads it.

- exit 0: stdout may be a JSON object (below); otherwise, for ``UserPromptSubmit`` and
  ``SessionStart``, plain stdout is context added for the model; for other events it is only
  recorded (Claude Code shows it in its transcript mode).
- exit 2: a blocking error; stderr is the reason. ``PreToolUse``: the call is denied and the
  model gets stderr. ``PermissionRequest``: denied. ``PostToolUse``/``PostToolUseFailure``:
  stderr goes to the model (the tool already ran). ``UserPromptSubmit``: the prompt is blocked
  and erased; stderr goes to the user only. ``Stop``/``SubagentStop``: the agent does not stop;
  stderr goes to the model. Other events: stderr goes to the user only.
- any other exit, a timeout, a crash: a non-blocking error (recorded, shown), unless the hook
  says ``on_failure = "block"``, which reads it as exit 2.

JSON (exit 0): ``continue`` (false: stop after the hooks, ``stopReason`` for the user),
``systemMessage`` (a warning for the user), ``suppressOutput``, ``decision`` (``block`` with a
``reason``; ``approve`` is the old spelling of allow on PreToolUse), ``hookSpecificOutput``:
``permissionDecision`` (allow / deny / ask / defer) with ``permissionDecisionReason``,
``updatedInput``, ``additionalContext``, and for ``PermissionRequest`` ``decision: {behavior,
updatedInput, message}``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

BLOCKING_EXIT = 2
DECISIONS = ("allow", "ask", "defer", "deny")
# Decisions combine by rank: deny > defer > ask > allow.
RANK = {"allow": 0, "ask": 1, "defer": 2, "deny": 3}
_PLAIN_STDOUT_IS_CONTEXT = frozenset({"UserPromptSubmit", "SessionStart"})
_STDERR_TO_MODEL = frozenset({"PostToolUse", "PostToolUseFailure", "Stop", "SubagentStop"})


@dataclass(frozen=True)
class Ran:
    """What one hook process (or plugin) did."""

    exit_code: int | None  # None: killed at its timeout
    stdout: str
    stderr: str
    duration_ms: int
    files_changed: tuple[dict[str, Any], ...] = ()
    failure: str = ""  # why it did not run or finish ("" when it exited)


def combine(a: str | None, b: str | None) -> str | None:
    """The stronger of two permission decisions (deny > defer > ask > allow)."""
    if a is None:
        return b
    if b is None:
        return a
    return a if RANK[a] >= RANK[b] else b


def _as_object(stdout: str) -> dict[str, Any] | None:
    text = stdout.strip()
    if not text.startswith("{"):
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def read_answer(event: str, ran: Ran, on_failure: str = "ignore") -> dict[str, Any]:
    """The effect of one hook's answer (the ``effect`` a ``HookRan`` records). ``updated_input``
    is in the hook's own dialect here; the pipeline translates it."""
    effect: dict[str, Any] = {}
    code = ran.exit_code
    if ran.failure or code is None or code not in (0, BLOCKING_EXIT):
        why = ran.failure or (
            "timed out" if code is None else f"exit code {code}: {ran.stderr.strip()[:500]}"
        )
        effect["failed"] = why
        if on_failure != "block":
            return effect
        return _blocking(event, effect, f"hook failed ({why})")
    if code == BLOCKING_EXIT:
        return _blocking(event, effect, ran.stderr.strip() or "blocked by a hook")
    data = _as_object(ran.stdout)
    if data is None:
        if event in _PLAIN_STDOUT_IS_CONTEXT and ran.stdout.strip():
            effect["context"] = ran.stdout.strip()
        return effect
    return _json_effect(event, data, effect)


def _blocking(event: str, effect: dict[str, Any], reason: str) -> dict[str, Any]:
    if event in ("PreToolUse", "PermissionRequest"):
        effect |= {"decision": "deny", "reason": reason}
    elif event == "UserPromptSubmit":
        effect |= {"blocked": True, "reason": reason}
    elif event in ("Stop", "SubagentStop"):
        effect |= {"blocked": True, "feedback": reason}
    elif event in _STDERR_TO_MODEL:
        effect["feedback"] = reason
    else:
        effect["message"] = reason  # for the user only
    return effect


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def _json_effect(event: str, data: dict[str, Any], effect: dict[str, Any]) -> dict[str, Any]:
    if data.get("continue") is False:
        effect["continue"] = False
        effect["stop_reason"] = _text(data.get("stopReason")) or "stopped by a hook"
    for key, name in (("systemMessage", "system_message"),):
        if _text(data.get(key)):
            effect[name] = data[key]
    if data.get("suppressOutput") is True:
        effect["suppress_output"] = True
    reason = _text(data.get("reason"))
    decision = data.get("decision")
    specific = data.get("hookSpecificOutput")
    specific = specific if isinstance(specific, dict) else {}
    if event == "PreToolUse":
        # The old top-level form first; hookSpecificOutput wins over it.
        if decision in ("approve", "block"):
            effect["decision"] = "allow" if decision == "approve" else "deny"
            if reason:
                effect["reason"] = reason
        chosen = specific.get("permissionDecision")
        if chosen in DECISIONS:
            effect["decision"] = chosen
            why = _text(specific.get("permissionDecisionReason"))
            if why:
                effect["reason"] = why
        if isinstance(specific.get("updatedInput"), dict):
            effect["updated_input"] = specific["updatedInput"]
    elif event == "PermissionRequest":
        verdict = specific.get("decision")
        if isinstance(verdict, dict) and verdict.get("behavior") in ("allow", "deny"):
            effect["decision"] = verdict["behavior"]
            if _text(verdict.get("message")):
                effect["reason"] = verdict["message"]
            if isinstance(verdict.get("updatedInput"), dict):
                effect["updated_input"] = verdict["updatedInput"]
    elif decision == "block":
        if event == "UserPromptSubmit":
            effect |= {"blocked": True, "reason": reason or "blocked by a hook"}
        elif event in ("Stop", "SubagentStop"):
            effect |= {"blocked": True, "feedback": reason or "a hook asked to continue"}
        elif event in _STDERR_TO_MODEL:
            effect["feedback"] = reason or "blocked by a hook"
    context = _text(specific.get("additionalContext"))
    if context:
        effect["context"] = context
    return effect
