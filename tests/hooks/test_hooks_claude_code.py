"""Claude Code's hooks, as its documentation writes them, run unchanged in whole sessions."""

from __future__ import annotations

from agent_helpers import Harness, collect, text, tool, turn
from hook_helpers import (
    FORMATTER,
    PROMPT_CONTEXT,
    STOP_ONCE,
    VALIDATOR,
    claude,
    script,
    start,
)

from coder_es.agent import updates as up
from coder_es.branching import Branching


def test_a_pretooluse_validator_blocks_rm_rf_with_exit_2(h: Harness) -> None:
    (h.root / "keep").mkdir()
    (h.root / "keep" / "a.txt").write_text("precious\n")
    hooks = [claude("PreToolUse", script(h.root, "validate.py", VALIDATOR), "Bash")]
    handle = start(
        h,
        [
            turn(tool("bash", command="rm -rf keep")),
            turn(tool("bash", command="ls keep")),
            turn(text("ok")),
        ],
        hooks,
    )
    collect(handle, "clean up")
    assert (h.root / "keep" / "a.txt").read_text() == "precious\n"
    ran = h.of(handle, "HookRan")
    assert [r.hook_event for r in ran] == ["PreToolUse", "PreToolUse"]
    first = ran[0]
    assert first.exit_code == 2
    assert first.input["tool_name"] == "Bash"
    assert first.input["tool_input"]["command"] == "rm -rf keep"
    assert first.effect["decision"] == "deny"
    decided = h.of(handle, "PermissionDecided")
    assert decided[0].decision == "deny" and decided[0].decided_by == "hook"
    results = h.of(handle, "ToolCallCompleted")
    assert "Blocked: rm -rf is not allowed in this project" in results[0].output
    assert results[0].is_error
    # The harmless call passed the hook (exit 0) and ran.
    assert ran[1].exit_code == 0 and "decision" not in ran[1].effect
    assert "a.txt" in results[1].output


def test_a_posttooluse_formatter_changes_the_file_and_the_next_edit_works(h: Harness) -> None:
    hooks = [claude("PostToolUse", FORMATTER, "Edit|Write")]
    handle = start(
        h,
        [
            turn(tool("write", path="src/new.py", content="x = 1   \ny = 2  \n")),
            # The agent edits what it now knows the file holds (the formatted text).
            turn(
                tool(
                    "edit",
                    path="src/new.py",
                    old_string="x = 1\ny = 2\n",
                    new_string="x = 3\ny = 2\n",
                )
            ),
            turn(text("done")),
        ],
        hooks,
    )
    updates = collect(handle, "write it")
    assert (h.root / "src" / "new.py").read_text() == "x = 3\ny = 2\n"
    results = h.of(handle, "ToolCallCompleted")
    assert not results[1].is_error, results[1].output
    by_hook = [c for c in results[0].files_changed if c.get("by")]
    assert by_hook and by_hook[0]["path"] == "src/new.py"
    assert by_hook[0]["by"].startswith("hooks.PostToolUse[0]")
    assert any(isinstance(u, up.HookRan) and u.event == "PostToolUse" for u in updates)
    # Rewinding to the user's message undoes the write and the hook's change together.
    user_node = next(e for e in h.events(handle) if type(e).__name__ == "UserMessageAdded")
    Branching(h.app, h.root).rewind(handle.id, str(user_node.originator_version))
    assert not (h.root / "src" / "new.py").exists()


def test_a_userpromptsubmit_hook_adds_context_the_model_sees(h: Harness) -> None:
    hooks = [claude("UserPromptSubmit", script(h.root, "context.py", PROMPT_CONTEXT))]
    handle = start(h, [turn(text("ok"))], hooks)
    collect(handle, "hello")
    request = h.providers[-1].requests[0]
    seen = str(request.messages[-1])
    assert "Project rule: answer in English. (prompt had 5 characters)" in seen
    (ran,) = h.of(handle, "HookRan")
    assert ran.input["prompt"] == "hello"
    assert ran.effect["context"].startswith("Project rule")


def test_a_stop_hook_keeps_the_agent_going_once(h: Harness) -> None:
    hooks = [claude("Stop", script(h.root, "stop.py", STOP_ONCE))]
    handle = start(h, [turn(text("all done")), turn(text("tests pass, done"))], hooks)
    collect(handle, "fix it")
    assert len(h.of(handle, "ModelResponded")) == 2
    ran = h.of(handle, "HookRan")
    assert [r.input["stop_hook_active"] for r in ran] == [False, True]
    assert ran[0].effect["blocked"] and not ran[1].effect.get("blocked")
    users = h.of(handle, "UserMessageAdded")
    assert users[-1].content == [{"type": "text", "text": "Run the tests before you stop."}]
    assert "Run the tests before you stop." in str(h.providers[-1].requests[1].messages[-1])


def test_exports_and_telemetry_show_every_hook_run(h: Harness) -> None:
    import json

    from coder_es.audit.export import ExportOptions, export_session

    hooks = [
        claude("PreToolUse", script(h.root, "validate.py", VALIDATOR), "Bash"),
        claude("PostToolUse", FORMATTER, "Write"),
    ]
    handle = start(
        h,
        [
            turn(tool("bash", command="rm -rf src")),
            turn(tool("write", path="src/new.py", content="x = 1   \n")),
            turn(text("ok")),
        ],
        hooks,
    )
    collect(handle, "go")
    md = export_session(h.app, handle.id, ExportOptions(format="md")).decode()
    assert "exit 2 → decision deny" in md and "### " in md
    assert "changed by the hook hooks.PostToolUse" in md
    html = export_session(h.app, handle.id, ExportOptions(format="html")).decode()
    assert "hook PreToolUse" in html and "changed by the hook" in html
    jsonl = export_session(h.app, handle.id, ExportOptions(format="jsonl")).decode()
    assert sum('"HookRan"' in line for line in jsonl.splitlines()) == 2
    otel = json.loads(export_session(h.app, handle.id, ExportOptions(format="otel")))
    spans = [s for rs in otel["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
    hooks_spans = [s for s in spans if s["name"].startswith("execute_hook")]
    assert [s["name"] for s in hooks_spans] == [
        "execute_hook PreToolUse",
        "execute_hook PostToolUse",
    ]
    tools = {s["spanId"]: s["name"] for s in spans if s["name"].startswith("execute_tool")}
    assert [tools.get(s["parentSpanId"]) for s in hooks_spans] == [
        "execute_tool bash",
        "execute_tool write",
    ]


def test_a_hook_of_a_read_only_agent_runs_read_only(h: Harness) -> None:
    from coder_es.sandbox import SandboxSettings, availability

    if not availability(SandboxSettings(), h.root).active:
        import pytest

        pytest.skip("the namespace sandbox is unavailable here")
    hooks = [claude("Stop", "echo sneaky > made-by-hook.txt")]
    handle = start(h, [turn(text("looked around"))], hooks, agent="plan")
    collect(handle, "look")
    assert not (h.root / "made-by-hook.txt").exists()
    (ran,) = h.of(handle, "HookRan")
    assert ran.exit_code != 0 and "Read-only file system" in ran.stderr
    assert "failed" in ran.effect


def test_the_agents_view_after_a_hook_survives_a_resume(h: Harness) -> None:
    from coder_es.workspace.workspace import Workspace

    hooks = [claude("PostToolUse", FORMATTER, "Write")]
    handle = start(
        h, [turn(tool("write", path="a.py", content="x = 1  \n")), turn(text("ok"))], hooks
    )
    collect(handle, "write")
    views = Workspace.views_from_events(h.events(handle))
    from coder_es.store.blobs import digest_of

    assert views["a.py"] == digest_of(b"x = 1\n")
