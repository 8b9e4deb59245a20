"""A harness session runs the hooks of the events coder-es sees (the prompt before a turn, the
tool results and the end after it), without the harness CLIs: a stand-in program speaks Claude
Code's stream-json (``--output-format stream-json``) as the real one does."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from uuid import UUID

import pytest
from agent_helpers import Harness
from hook_helpers import PROMPT_CONTEXT, claude, script

from coder_es.agent import updates as up
from coder_es.harness.runner import HarnessSession
from coder_es.harness.spec import HarnessSpec
from coder_es.sandbox import SandboxSettings, availability
from projections.files import open_files

# Claude Code's stream for one turn: it runs `ls` with its Bash tool, then answers with the
# prompt it was given (the last argument), so the test sees what the harness was sent.
FAKE_CLAUDE = """\
import json, sys
prompt = sys.argv[-1]
def say(obj):
    print(json.dumps(obj), flush=True)
say({"type": "system", "subtype": "init", "session_id": "fake-1", "model": "fake-model"})
say({"type": "assistant", "parent_tool_use_id": None, "message": {"id": "m1", "content": [
    {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}]}})
say({"type": "user", "parent_tool_use_id": None, "message": {"content": [
    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "README.md"}]}})
say({"type": "assistant", "parent_tool_use_id": None, "message": {"id": "m2", "content": [
    {"type": "text", "text": "I was told: " + prompt}]}})
say({"type": "result", "subtype": "success", "is_error": False, "session_id": "fake-1",
     "total_cost_usd": 0, "usage": {"input_tokens": 1, "output_tokens": 1}})
"""

# PostToolUse: writes down the command Claude Code's Bash tool ran.
POST_LOG = 'jq -r \'.tool_name + ": " + .tool_input.command\' >> "$CLAUDE_PROJECT_DIR"/tool-log.txt'


def _session(h: Harness, tmp_path: Path, hooks: list[object]) -> HarnessSession:
    found = availability(SandboxSettings(mode="auto"), h.root)
    if not found.active:
        pytest.skip(f"harness sessions need the namespace sandbox: {found.reason}")
    # Inside the workspace (the sandbox has a private /tmp), where no change is recorded.
    fake = h.root / ".git" / "fake_claude.py"
    fake.write_text(FAKE_CLAUDE)
    spec = HarnessSpec("fake-claude", "claude-code", (sys.executable, str(fake)))
    return HarnessSession.create(
        h.app, h.root, spec, yes=True, hooks=tuple(hooks), store_path=h.app.config.path
    )


def _send(session: HarnessSession, prompt: str) -> list[up.Update]:
    async def go() -> list[up.Update]:
        return [u async for u in session.send(prompt)]

    return asyncio.run(go())


def test_prompt_tool_result_and_stop_hooks_run_around_a_harness_turn(
    h: Harness, tmp_path: Path
) -> None:
    hooks = [
        claude("UserPromptSubmit", script(h.root, "context.py", PROMPT_CONTEXT)),
        claude("PostToolUse", POST_LOG, "Bash"),
        claude("Stop", "echo stopped > stop.txt"),
    ]
    session = _session(h, tmp_path, hooks)
    updates = _send(session, "hello")
    assert session.outcome is not None and session.outcome.reason == "end_turn", updates
    events = h.app.session_events(session.session_id)
    ran = [e for e in events if type(e).__name__ == "HookRan"]
    assert [r.hook_event for r in ran] == ["UserPromptSubmit", "PostToolUse", "Stop"]
    # The context reached the harness with the prompt; the user's message is the prompt.
    answer = next(
        e for e in events if type(e).__name__ == "ModelResponded" and e.blocks[0].get("text")
    )
    assert "Project rule: answer in English. (prompt had 5 characters)" in answer.blocks[0]["text"]
    user = next(e for e in events if type(e).__name__ == "UserMessageAdded")
    assert "Project rule" not in str(user.content)
    # The tool result's hook saw Claude Code's names, and wrote its file (recorded).
    assert ran[1].input["tool_name"] == "Bash" and ran[1].input["tool_use_id"] == "toolu_1"
    assert (h.root / "tool-log.txt").read_text() == "Bash: ls\n"
    files = open_files(h.app, UUID(session.id))
    assert files.hooks_at(str(files.head)) == {"tool-log.txt": ran[1].hook, "stop.txt": ran[2].hook}
    assert [u.event for u in updates if isinstance(u, up.HookRan)] == [r.hook_event for r in ran]


def test_a_blocked_prompt_never_reaches_the_harness(h: Harness, tmp_path: Path) -> None:
    guard = (
        "jq -e '.prompt | test(\"secret\")' >/dev/null && { echo 'no secrets' >&2; exit 2; }; "
        "exit 0"
    )
    session = _session(h, tmp_path, [claude("UserPromptSubmit", guard)])
    _send(session, "first")
    before = h.app.session_events(session.session_id)
    updates = _send(session, "tell me the secret")
    assert any(isinstance(u, up.Error) and u.message == "no secrets" for u in updates)
    events = h.app.session_events(session.session_id)
    new = events[len(before) :]
    assert [type(e).__name__ for e in new] == ["HookRan"]
    assert new[0].effect["blocked"] and new[0].exit_code == 2
