# ruff: noqa: E501  (stream lines as the CLIs printed them)
"""Each CLI's stream, decoded: lines as the pinned CLIs printed them (Claude Code 2.1.332,
Codex 0.171.0, Gemini CLI 0.61.0, against the fake model), trimmed of fields we ignore."""

from __future__ import annotations

import json

from coder_es.harness import stream as hs
from coder_es.harness.adapters import ClaudeAdapter, CodexAdapter, GeminiAdapter, TurnRequest

CLAUDE = [
    '{"type":"system","subtype":"init","cwd":"/tmp/ws","session_id":"95a20ecc-bf0c-441f-8903-40644364ca54","tools":["Bash","Write"],"model":"claude-opus-5-5","permissionMode":"bypassPermissions","claude_code_version":"2.1.332"}',
    '{"type":"assistant","message":{"id":"msg_0001","type":"message","role":"assistant","model":"claude-opus-5-5","content":[{"type":"tool_use","id":"toolu_0001","name":"Write","input":{"file_path":"/tmp/ws/notes.md","content":"# Notes\\n"}}],"stop_reason":null,"usage":{"input_tokens":100,"output_tokens":1}},"parent_tool_use_id":null,"session_id":"95a20ecc"}',
    '{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_0001","type":"tool_result","content":"File created successfully at: /tmp/ws/notes.md"}]},"parent_tool_use_id":null,"session_id":"95a20ecc"}',
    '{"type":"assistant","message":{"id":"msg_0003","content":[{"type":"text","text":"All done."}]},"parent_tool_use_id":null}',
    '{"type":"result","subtype":"success","is_error":false,"duration_api_ms":221,"stop_reason":"end_turn","session_id":"95a20ecc","total_cost_usd":0.0024,"usage":{"input_tokens":300,"cache_creation_input_tokens":0,"output_tokens":60},"result":"All done.","permission_denials":[]}',
]

CODEX = [
    '{"type":"thread.started","thread_id":"01a21fb1-1c7b-71f3-95bd-f80a96be635a"}',
    '{"type":"turn.started"}',
    '{"type":"item.started","item":{"id":"item_1","type":"command_execution","command":"/bin/bash -lc \'echo made > made.txt\'","aggregated_output":"","exit_code":null,"status":"in_progress"}}',
    '{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"/bin/bash -lc \'echo made > made.txt\'","aggregated_output":"","exit_code":0,"status":"completed"}}',
    '{"type":"item.completed","item":{"id":"item_3","type":"agent_message","text":"All done."}}',
    '{"type":"turn.completed","usage":{"input_tokens":300,"cached_input_tokens":0,"output_tokens":60,"reasoning_output_tokens":0}}',
]

GEMINI = [
    '{"type":"init","timestamp":"2026-11-28T01:07:25.758Z","session_id":"cc2266b8-6d1c-4c1c-b763-0c41097044cb","model":"auto"}',
    '{"type":"message","timestamp":"2026-11-28T01:07:25.761Z","role":"user","content":"do it"}',
    '{"type":"tool_use","timestamp":"2026-11-28T01:07:27.160Z","tool_name":"run_shell_command","tool_id":"run_shell_command_1","parameters":{"command":"echo made > made.txt","description":"run it"}}',
    '{"type":"tool_result","timestamp":"2026-11-28T01:07:27.394Z","tool_id":"run_shell_command_1","status":"success","output":""}',
    '{"type":"message","timestamp":"2026-11-28T01:07:27.497Z","role":"assistant","content":"All done.","delta":true}',
    '{"type":"result","timestamp":"2026-11-28T01:07:27.511Z","status":"success","stats":{"total_tokens":480,"input_tokens":400,"output_tokens":80,"cached":0,"duration_ms":1754,"tool_calls":2}}',
]


def _decode(adapter: object, lines: list[str]) -> list[hs.HarnessEvent]:
    out: list[hs.HarnessEvent] = []
    for line in lines:
        out += adapter.decode(json.loads(line))  # type: ignore[attr-defined]
    return out


def test_claude_code_stream() -> None:
    events = _decode(ClaudeAdapter(), CLAUDE)
    assert events == [
        hs.HarnessStarted("95a20ecc-bf0c-441f-8903-40644364ca54", "claude-opus-5-5", "2.1.332"),
        hs.ToolUse(
            "toolu_0001", "Write", {"file_path": "/tmp/ws/notes.md", "content": "# Notes\n"}
        ),
        hs.ToolResult("toolu_0001", "File created successfully at: /tmp/ws/notes.md", False),
        hs.Text("All done.", "msg_0003"),
        hs.Usage(
            {"input_tokens": 300, "cache_creation_input_tokens": 0, "output_tokens": 60}, 0.0024
        ),
        hs.Finished(True, "end_turn", None),
    ]


def test_codex_stream() -> None:
    events = _decode(CodexAdapter(), CODEX)
    assert events[0] == hs.HarnessStarted("01a21fb1-1c7b-71f3-95bd-f80a96be635a")
    assert events[1] == hs.ToolUse(
        "item_1", "shell", {"command": "/bin/bash -lc 'echo made > made.txt'"}
    )
    assert events[2] == hs.ToolResult("item_1", "[exit code 0]", False)
    assert events[3] == hs.Text("All done.")
    assert events[-1] == hs.Finished(True)


def test_gemini_stream() -> None:
    events = _decode(GeminiAdapter(), GEMINI)
    assert events[0] == hs.HarnessStarted("cc2266b8-6d1c-4c1c-b763-0c41097044cb", "auto")
    assert events[1] == hs.ToolUse(
        "run_shell_command_1",
        "run_shell_command",
        {"command": "echo made > made.txt", "description": "run it"},
    )
    assert events[2] == hs.ToolResult("run_shell_command_1", "", False)
    assert events[3] == hs.Text("All done.")
    assert events[-1] == hs.Finished(True, "end_turn", None)


def test_presets_map_to_each_clis_flags() -> None:
    def turn(read_only: bool, yes: bool) -> TurnRequest:
        return TurnRequest("p", None, read_only, yes, "/ws", "http://127.0.0.1:1/t")

    claude, gemini = ClaudeAdapter(), GeminiAdapter()
    assert "--dangerously-skip-permissions" in claude.argv(["claude"], turn(False, True))
    assert claude.argv(["claude"], turn(True, True))[5:7] == ["--permission-mode", "plan"]
    assert "--yolo" in gemini.argv(["gemini"], turn(False, True))
    assert "--yolo" not in gemini.argv(["gemini"], turn(True, True))
    resumed = CodexAdapter().argv(["codex"], TurnRequest("p", "T1", False, True, "/ws", "u"))
    assert resumed[:4] == ["codex", "exec", "resume", "T1"]
