"""Any agent as a session: Claude Code, Codex, Gemini CLI or an ACP agent, run by coder-es in
its sandbox with its model traffic recorded (``docs/harness.md``)."""
