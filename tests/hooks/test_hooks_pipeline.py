"""The pipeline's order: configuration order, rewrites chained, decisions combined by strength;
Python plugins in the same pipeline."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from agent_helpers import Harness, collect, text, tool, turn
from hook_helpers import script, start

from coder_es.hooks import plugins
from coder_es.hooks.answer import Ran, combine, read_answer
from coder_es.hooks.spec import HookSpec, matcher_matches
from coder_es.permissions.rules import Rule

# Appends its word to the command it got (the command as the hooks before it left it).
APPEND = """#!/usr/bin/env python3
import json
import sys

data = json.load(sys.stdin)
command = data["tool_input"]["command"]
print(json.dumps({{"hookSpecificOutput": {{"hookEventName": "PreToolUse",
                                         "updatedInput": {{"command": command + " {word}"}}}}}}))
"""

DECIDE = """#!/usr/bin/env python3
import json
print(json.dumps({{"hookSpecificOutput": {{"hookEventName": "PreToolUse",
    "permissionDecision": "{decision}", "permissionDecisionReason": "{decision} by {name}"}}}}))
"""


def ours(event: str, command: str, matcher: str = "bash", index: int = 0) -> HookSpec:
    return HookSpec(event, command, matcher, index=index)


def test_two_hooks_rewriting_the_same_field_compose_in_configuration_order(h: Harness) -> None:
    first = script(h.root, "append_b.py", APPEND.format(word="b"))
    second = script(h.root, "append_c.py", APPEND.format(word="c"))
    hooks = [ours("PreToolUse", first, index=0), ours("PreToolUse", second, index=1)]
    handle = start(h, [turn(tool("bash", command="echo a")), turn(text("ok"))], hooks)
    collect(handle, "say it")
    ran = h.of(handle, "HookRan")
    # Each saw the input as the ones before it rewrote it.
    assert [r.input["tool_input"]["command"] for r in ran] == ["echo a", "echo a b"]
    assert [r.effect["updated_input"] for r in ran] == [
        {"command": "echo a b"},
        {"command": "echo a b c"},
    ]
    (result,) = h.of(handle, "ToolCallCompleted")
    assert result.output.startswith("a b c")
    # The recorded order is the configuration's, whichever finished first.
    assert [r.hook for r in ran] == ["hooks.PreToolUse[0]", "hooks.PreToolUse[1]"]


@pytest.mark.parametrize(
    ("decisions", "expected", "by"),
    [
        (("allow", "deny"), "deny", "hook"),
        (("deny", "allow"), "deny", "hook"),
        (("ask", "allow"), "allow", "user"),  # asked (ask beats allow), the user allowed it
        (("allow", "allow"), "allow", "hook"),
    ],
)
def test_decisions_combine_deny_over_ask_over_allow(
    h: Harness, decisions: tuple[str, str], expected: str, by: str
) -> None:
    hooks = [
        ours("PreToolUse", script(h.root, f"d{i}.py", DECIDE.format(decision=d, name=i)), index=i)
        for i, d in enumerate(decisions)
    ]
    # The rules ask, so that a hook's allow is what decides.
    ask = (Rule("bash", "*", "ask"),)
    handle = start(h, [turn(tool("bash", command="echo hi")), turn(text("ok"))], hooks, rules=ask)
    collect(handle, "go", yes=True)
    (decided,) = h.of(handle, "PermissionDecided")
    assert (decided.decision, decided.decided_by) == (expected, by)
    if expected == "deny":
        assert decided.reason == f"deny by {decisions.index('deny')}"


def test_a_hooks_allow_never_overrides_a_rules_deny(h: Harness) -> None:
    allow = script(h.root, "allow.py", DECIDE.format(decision="allow", name="x"))
    handle = start(
        h,
        [turn(tool("bash", command="echo hi")), turn(text("ok"))],
        [ours("PreToolUse", allow)],
        rules=(Rule("bash", "echo *", "deny"),),
    )
    collect(handle, "go")
    (decided,) = h.of(handle, "PermissionDecided")
    assert decided.decision == "deny" and decided.decided_by == "rule"


def test_combine_and_read_answer_follow_claude_codes_rules() -> None:
    order = ["allow", "ask", "defer", "deny"]
    for a in order:
        for b in order:
            assert combine(a, b) == max(a, b, key=order.index)
    assert read_answer("PreToolUse", Ran(2, "", "no\n", 1)) == {"decision": "deny", "reason": "no"}
    # Exit 1 does not block (a non-blocking error) unless the hook says on_failure = "block".
    assert "decision" not in read_answer("PreToolUse", Ran(1, "", "oops", 1))
    assert read_answer("PreToolUse", Ran(1, "", "oops", 1), "block")["decision"] == "deny"
    assert read_answer("PreToolUse", Ran(None, "", "", 1), "block")["decision"] == "deny"
    old = read_answer("PreToolUse", Ran(0, '{"decision": "approve"}', "", 1))
    assert old["decision"] == "allow"
    stop = read_answer("Stop", Ran(0, '{"continue": false, "stopReason": "enough"}', "", 1))
    assert stop == {"continue": False, "stop_reason": "enough"}
    assert read_answer("UserPromptSubmit", Ran(2, "", "secret in prompt", 1))["blocked"]
    assert read_answer("SessionStart", Ran(0, "branch main\n", "", 1)) == {"context": "branch main"}
    # Plain stdout of a PreToolUse hook is only recorded.
    assert read_answer("PreToolUse", Ran(0, "checked\n", "", 1)) == {}
    assert matcher_matches("Edit|Write", "Write") and not matcher_matches("Edit|Write", "Writer")
    assert matcher_matches("mcp__memory__.*", "mcp__memory__save")
    assert matcher_matches("^Notebook", "NotebookEdit") and matcher_matches("*", "anything")


class Guard:
    """A plugin: denies writes to ``*.lock`` files, adds context to prompts."""

    def on_tool_call(self, payload: dict[str, object]) -> dict[str, object] | None:
        data = payload["tool_input"]
        assert isinstance(data, dict)
        if str(data.get("path", "")).endswith(".lock"):
            return {
                "hookSpecificOutput": {
                    "permissionDecision": "deny",
                    "permissionDecisionReason": "lock files are generated",
                }
            }
        return None

    def on_prompt(self, payload: dict[str, object]) -> dict[str, object]:
        return {"hookSpecificOutput": {"additionalContext": "plugin context"}}


def test_a_python_plugin_runs_in_the_same_pipeline(
    h: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dist = tmp_path / "site" / "guard_plugin-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: guard-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[coder_es.plugins]\nguard = {__name__}:Guard\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    sys.modules.setdefault(__name__, sys.modules[__name__])
    plugins.load_plugin.cache_clear()
    assert "guard" in plugins.installed()
    hooks = [
        HookSpec("PreToolUse", "plugin:guard", "write"),
        HookSpec("UserPromptSubmit", "plugin:guard"),
    ]
    handle = start(
        h,
        [turn(tool("write", path="deps.lock", content="x")), turn(text("ok"))],
        hooks,
    )
    collect(handle, "lock it")
    assert not (h.root / "deps.lock").exists()
    ran = h.of(handle, "HookRan")
    assert [(r.hook_event, r.hook) for r in ran] == [
        ("UserPromptSubmit", "plugin:guard"),
        ("PreToolUse", "plugin:guard"),
    ]
    assert ran[1].effect["decision"] == "deny"
    (result,) = h.of(handle, "ToolCallCompleted")
    assert "lock files are generated" in result.output
    assert "plugin context" in str(h.providers[-1].requests[0].messages[-1])
    plugins.load_plugin.cache_clear()


ALLOW_REQUEST = """#!/usr/bin/env python3
import json
print(json.dumps({"hookSpecificOutput": {"hookEventName": "PermissionRequest",
                                         "decision": {"behavior": "allow"}}}))
"""


def test_permission_request_notification_and_session_end_hooks(h: Harness) -> None:
    import asyncio

    hooks = [
        HookSpec("PermissionRequest", script(h.root, "allow.py", ALLOW_REQUEST), "bash"),
        HookSpec("Notification", "cat > /dev/null"),
        HookSpec("SessionEnd", "cat > /dev/null"),
    ]
    ask = (Rule("bash", "*", "ask"), Rule("write", "*", "ask"))
    handle = start(
        h,
        [
            turn(tool("bash", command="echo hi"), tool("write", path="n.txt", content="n\n")),
            turn(text("ok")),
        ],
        hooks,
        rules=ask,
    )
    collect(handle, "go", yes=True)
    asyncio.run(handle.end("other"))
    ran = h.of(handle, "HookRan")
    assert [r.hook_event for r in ran] == ["PermissionRequest", "Notification", "SessionEnd"]
    assert ran[1].input["message"] == "coder-es needs your permission to use write"
    assert ran[2].input["reason"] == "other"
    decided = {d.tool: d.decided_by for d in h.of(handle, "PermissionDecided")}
    assert decided == {"bash": "hook", "write": "user"}


def test_precompact_hooks_run_before_a_compaction_and_are_recorded(h: Harness) -> None:
    too_long = {
        "error": {
            "type": "invalid_request_error",
            "message": "prompt is too long: maximum context length exceeded",
        }
    }
    # Exit 2 cannot stop our compaction (it is what lets the turn go on): recorded only.
    hooks = [HookSpec("PreCompact", "jq -e '.trigger == \"auto\"' > /dev/null && exit 2")]
    turns = [turn(text(f"answer {i}")) for i in range(3)] + [too_long, turn(text("final"))]
    handle = start(h, turns, hooks)
    for i in range(4):
        collect(handle, f"question {i}")
    (ran,) = h.of(handle, "HookRan")
    assert ran.hook_event == "PreCompact" and ran.exit_code == 2
    assert ran.input["trigger"] == "auto"
    kinds = h.kinds(handle)
    assert kinds.index("HookRan") < kinds.index("ContextCompacted")
    assert h.of(handle, "ModelResponded")[-1].blocks == [{"type": "text", "text": "final"}]


def test_a_hooks_defer_parks_the_call_and_the_turn_waits(h: Harness) -> None:
    """Issue 34: ``permissionDecision: "defer"`` parks the question even where the rules allow
    (and with several calls in the response: the others run, in call order)."""
    defer = script(h.root, "defer.py", DECIDE.format(decision="defer", name="gate"))
    handle = start(
        h,
        [turn(tool("bash", command="echo one"), tool("read", path="a.txt")), turn(text("ok"))],
        [ours("PreToolUse", defer)],
    )
    (h.root / "a.txt").write_text("x\n")
    collect(handle, "go", yes=True)
    assert handle.outcome is not None and handle.outcome.reason == "waiting"
    (deferred,) = h.of(handle, "PermissionDeferred")
    assert (deferred.tool, deferred.source, deferred.reason) == ("bash", "hook", "defer by gate")
    assert [c.name for c in h.of(handle, "ToolCallCompleted")] == ["read"]
    (parked,) = h.of(handle, "TurnParked")
    assert parked.tool_use_ids == [deferred.tool_use_id]
    assert h.of(handle, "PermissionDecided")[-1].tool == "read"
