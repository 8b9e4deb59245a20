"""Hook scripts written as Claude Code's hooks documentation shows them, and a harness that
runs a session with configured hooks."""

from __future__ import annotations

import asyncio
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent_helpers import Harness

from coder_es.hooks.spec import HookSpec
from coder_es.providers.scripted import ScriptedProvider
from coder_es.service.api import AgentService, SessionHandle, SessionOptions

# PreToolUse: the documentation's Bash command validator (exit 2: blocked, stderr to Claude).
VALIDATOR = """#!/usr/bin/env python3
import json
import sys

try:
    input_data = json.load(sys.stdin)
except json.JSONDecodeError as e:
    print(f"Error: Invalid JSON input: {e}", file=sys.stderr)
    sys.exit(1)

tool_name = input_data.get("tool_name", "")
command = input_data.get("tool_input", {}).get("command", "")

if tool_name != "Bash" or not command:
    sys.exit(0)

if "rm -rf" in command:
    print("Blocked: rm -rf is not allowed in this project", file=sys.stderr)
    sys.exit(2)

sys.exit(0)
"""

# PostToolUse: the documentation's formatter, one file at a time from tool_input.file_path
# (here the "formatter" strips trailing blanks from Python files).
FORMATTER = (
    "jq -r '.tool_input.file_path' | { read file_path; if echo \"$file_path\" | grep -q '\\.py$';"
    " then sed -i 's/[[:space:]]*$//' \"$file_path\"; fi; }"
)

# UserPromptSubmit: plain stdout on exit 0 is added as context.
PROMPT_CONTEXT = """#!/usr/bin/env python3
import json
import sys

input_data = json.load(sys.stdin)
prompt = input_data["prompt"]
print(f"Project rule: answer in English. (prompt had {len(prompt)} characters)")
sys.exit(0)
"""

# Stop: keeps the agent going once (stop_hook_active guards against a loop).
STOP_ONCE = """#!/usr/bin/env python3
import json
import sys

input_data = json.load(sys.stdin)
if input_data.get("stop_hook_active"):
    sys.exit(0)
print(json.dumps({"decision": "block", "reason": "Run the tests before you stop."}))
sys.exit(0)
"""


def script(root: Path, name: str, text: str) -> str:
    """Write an executable hook script under ``.claude/hooks`` and return its command as a
    settings file names it."""
    path = root / ".claude" / "hooks" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return f'"$CLAUDE_PROJECT_DIR"/.claude/hooks/{name}'


def claude(event: str, command: str, matcher: str = "", index: int = 0) -> HookSpec:
    return HookSpec(event, command, matcher, dialect="claude-code", index=index)


def service(h: Harness, turns: Sequence[dict[str, Any]], hooks: Sequence[HookSpec]) -> AgentService:
    def factory(name: str, model: str) -> ScriptedProvider:
        provider = ScriptedProvider(list(turns), model="scripted-test")
        h.providers.append(provider)
        return provider

    return AgentService(h.app, h.root, provider_factory=factory, hooks=tuple(hooks))


def start(
    h: Harness, turns: Sequence[dict[str, Any]], hooks: Sequence[HookSpec], **options: Any
) -> SessionHandle:
    return asyncio.run(service(h, turns, hooks).create_session(SessionOptions(**options)))
