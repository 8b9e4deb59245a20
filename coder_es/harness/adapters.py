"""One adapter per CLI: how to start it for a turn, where its model traffic goes, how to read it.

Each adapter knows, for its CLI:

- the command line of one non-interactive turn with its machine-readable stream on stdout
  (``claude -p --output-format stream-json --verbose``, ``codex exec --json``,
  ``gemini -p --output-format stream-json``), resuming the harness's own session on later turns;
- how to point it at the recording proxy (Claude ``ANTHROPIC_BASE_URL``; Codex a
  ``model_providers`` entry passed as ``-c`` overrides, since it ignores ``OPENAI_BASE_URL``;
  Gemini ``GOOGLE_GEMINI_BASE_URL``) and where the proxy forwards (the user's own base URL or the
  provider's default);
- the flags our agent presets map to (``docs/harness.md`` has the table);
- the decoder from one line of its stream to ``coder_es.harness.stream`` events.

The formats were read from the pinned CLIs' own output (Claude Code 2.1.332, Codex 0.171.0,
Gemini CLI 0.61.0); an unknown line type is ignored, not an error (newer CLIs add types).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from coder_es.harness import stream as hs


@dataclass(frozen=True)
class TurnRequest:
    prompt: str
    resume: str | None  # the harness's own session id, for a later turn
    read_only: bool  # plan / explore presets
    yes: bool  # the user allowed what would be asked (--yes)
    workspace: str
    proxy_url: str  # base URL with the proxy's token
    prompt_tool: bool = False  # the proxy serves coder_es.harness.approve
    fork_at: str | None = None  # resume as a fork ending at this message (Claude Code)


class Adapter:
    kind: ClassVar[str]
    default_command: ClassVar[tuple[str, ...]]
    package: ClassVar[str]  # the npm package whose version is recorded
    upstream_env: ClassVar[str]
    upstream_default: ClassVar[str]
    key_env: ClassVar[tuple[str, ...]] = ()

    def argv(self, command: list[str], turn: TurnRequest) -> list[str]:
        raise NotImplementedError

    def env(self, turn: TurnRequest, environ: Mapping[str, str]) -> dict[str, str]:
        raise NotImplementedError

    def upstream(self, environ: Mapping[str, str]) -> str:
        return (environ.get(self.upstream_env) or self.upstream_default).rstrip("/")

    def decode(self, obj: dict[str, Any]) -> list[hs.HarnessEvent]:
        raise NotImplementedError


# ---------------------------------------------------------------------- Claude Code


class ClaudeAdapter(Adapter):
    kind = "claude-code"
    default_command = ("claude",)
    package = "@anthropic-ai/claude-code"
    upstream_env = "ANTHROPIC_BASE_URL"
    upstream_default = "https://api.anthropic.com"

    def argv(self, command: list[str], turn: TurnRequest) -> list[str]:
        args = [*command, "-p", "--output-format", "stream-json", "--verbose"]
        if turn.read_only:
            args += ["--permission-mode", "plan"]
        elif turn.yes:
            args += ["--dangerously-skip-permissions"]
        elif turn.prompt_tool:
            # What Claude Code would ask the user, our rules decide (coder_es.harness.approve).
            from coder_es.harness.approve import PROMPT_TOOL, mcp_config

            args += ["--permission-mode", "default", "--permission-prompt-tool", PROMPT_TOOL]
            args += ["--mcp-config", mcp_config(turn.proxy_url)]
        else:
            args += ["--permission-mode", "acceptEdits"]
        if turn.resume:
            args += ["--resume", turn.resume]
            if turn.fork_at:
                # Its own fork: a new session holding the conversation up to that message.
                args += ["--fork-session", "--resume-session-at", turn.fork_at]
        return [*args, "--", turn.prompt]

    def env(self, turn: TurnRequest, environ: Mapping[str, str]) -> dict[str, str]:
        return {
            "ANTHROPIC_BASE_URL": turn.proxy_url,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            # Root (inside our user namespace) with bypassed prompts: Claude Code asks for it.
            "IS_SANDBOX": "1",
        }

    def __init__(self) -> None:
        self._seen_text: set[tuple[str, int]] = set()

    def decode(self, obj: dict[str, Any]) -> list[hs.HarnessEvent]:
        kind = obj.get("type")
        out: list[hs.HarnessEvent] = []
        if kind == "system" and obj.get("subtype") == "init":
            out.append(
                hs.HarnessStarted(
                    obj.get("session_id"),
                    str(obj.get("model") or ""),
                    obj.get("claude_code_version"),
                )
            )
        elif kind == "assistant" and obj.get("parent_tool_use_id") is None:
            message = obj.get("message") or {}
            for block in message.get("content") or []:
                if block.get("type") == "text" and block.get("text"):
                    out.append(hs.Text(block["text"], message.get("id")))
                elif block.get("type") == "thinking" and block.get("thinking"):
                    out.append(hs.Thinking(block["thinking"]))
                elif block.get("type") == "tool_use":
                    out.append(
                        hs.ToolUse(block["id"], block["name"], dict(block.get("input") or {}))
                    )
        elif kind == "user" and obj.get("parent_tool_use_id") is None:
            content = (obj.get("message") or {}).get("content")
            for block in content if isinstance(content, list) else []:
                if block.get("type") == "tool_result":
                    out.append(
                        hs.ToolResult(
                            block.get("tool_use_id", ""),
                            _text_of(block.get("content")),
                            bool(block.get("is_error")),
                        )
                    )
        elif kind == "result":
            usage = obj.get("usage") or {}
            out.append(hs.Usage(_ints(usage), obj.get("total_cost_usd")))
            for d in obj.get("permission_denials") or []:
                out.append(
                    hs.Denied(
                        str(d.get("tool_use_id", "")),
                        str(d.get("tool_name", "")),
                        "denied by Claude Code",
                    )
                )
            failed = bool(obj.get("is_error")) or obj.get("subtype") != "success"
            reason = str(obj.get("stop_reason") or obj.get("subtype") or "end_turn")
            error = str(obj.get("result") or obj.get("subtype")) if failed else None
            out.append(hs.Finished(not failed, reason, error))
        return out


# ---------------------------------------------------------------------- Codex


class CodexAdapter(Adapter):
    kind = "codex"
    default_command = ("codex",)
    package = "@openai/codex"
    upstream_env = "OPENAI_BASE_URL"
    upstream_default = "https://api.openai.com/v1"

    def argv(self, command: list[str], turn: TurnRequest) -> list[str]:
        args = [*command, "exec"]
        if turn.resume:
            args += ["resume", turn.resume]
        args += ["--json", "--skip-git-repo-check"]
        # Our sandbox confines the files (and, read-only presets, drops every write); Codex's own
        # sandbox (landlock) cannot nest in our namespaces, so it is off, and its approvals too:
        # ``codex exec`` cannot ask anyone.
        args += ["--dangerously-bypass-approvals-and-sandbox"]
        provider = (
            f'model_providers.coder_es={{name="coder-es proxy",base_url="{turn.proxy_url}",'
            f'wire_api="responses",env_key="OPENAI_API_KEY"}}'
        )
        args += ["-c", provider, "-c", "model_provider=coder_es", "-c", "features.plugins=false"]
        return [*args, "--", turn.prompt]

    def env(self, turn: TurnRequest, environ: Mapping[str, str]) -> dict[str, str]:
        return {}

    def decode(self, obj: dict[str, Any]) -> list[hs.HarnessEvent]:
        kind = obj.get("type")
        if kind == "thread.started":
            return [hs.HarnessStarted(obj.get("thread_id"))]
        if kind == "turn.completed":
            return [hs.Usage(_ints(obj.get("usage") or {})), hs.Finished(True)]
        if kind == "turn.failed":
            error = (obj.get("error") or {}).get("message") or "the turn failed"
            return [hs.Finished(False, "error", str(error))]
        if kind == "error":
            return [hs.Note(str(obj.get("message") or "error"))]
        item = obj.get("item") or {}
        itype = item.get("type")
        iid = str(item.get("id", ""))
        if kind == "item.started" and itype == "command_execution":
            return [hs.ToolUse(iid, "shell", {"command": item.get("command", "")})]
        if kind == "item.started" and itype == "mcp_tool_call":
            name = f"mcp__{item.get('server', '')}__{item.get('tool', '')}"
            return [hs.ToolUse(iid, name, dict(item.get("arguments") or {}))]
        if kind != "item.completed":
            return []
        if itype == "agent_message":
            return [hs.Text(str(item.get("text", "")))]
        if itype == "reasoning":
            return [hs.Thinking(str(item.get("text", "")))]
        if itype == "command_execution":
            code = item.get("exit_code")
            output = str(item.get("aggregated_output") or "") + f"\n[exit code {code}]"
            failed = item.get("status") == "failed" or (code not in (0, None))
            return [hs.ToolResult(iid, output.lstrip("\n"), failed)]
        if itype == "file_change":
            changes = item.get("changes") or []
            listing = ", ".join(f"{c.get('kind')} {c.get('path')}" for c in changes)
            return [
                hs.ToolResult(
                    iid,
                    listing,
                    item.get("status") == "failed",
                    name="apply_patch",
                    input={"changes": changes},
                )
            ]
        if itype == "mcp_tool_call":
            result = item.get("result") or item.get("error") or ""
            return [
                hs.ToolResult(
                    iid,
                    json.dumps(result) if not isinstance(result, str) else result,
                    item.get("status") == "failed",
                )
            ]
        if itype == "error":
            return [hs.Note(str(item.get("message", "")))]
        return []


# ---------------------------------------------------------------------- Gemini CLI


class GeminiAdapter(Adapter):
    kind = "gemini"
    default_command = ("gemini",)
    package = "@google/gemini-cli"
    upstream_env = "GOOGLE_GEMINI_BASE_URL"
    upstream_default = "https://generativelanguage.googleapis.com"

    def argv(self, command: list[str], turn: TurnRequest) -> list[str]:
        args = [*command, "--output-format", "stream-json"]
        if turn.read_only:
            args += ["--approval-mode", "default"]
        elif turn.yes:
            args += ["--yolo"]
        else:
            args += ["--approval-mode", "auto_edit"]
        if turn.resume:
            args += ["--resume", turn.resume]
        return [*args, "-p", turn.prompt]

    def env(self, turn: TurnRequest, environ: Mapping[str, str]) -> dict[str, str]:
        # Without it ``--yolo`` is silently downgraded in a folder Gemini was never told to trust.
        return {"GOOGLE_GEMINI_BASE_URL": turn.proxy_url, "GEMINI_CLI_TRUST_WORKSPACE": "true"}

    def decode(self, obj: dict[str, Any]) -> list[hs.HarnessEvent]:
        kind = obj.get("type")
        if kind == "init":
            return [hs.HarnessStarted(obj.get("session_id"), str(obj.get("model") or ""))]
        if kind == "message" and obj.get("role") == "assistant":
            return [hs.Text(str(obj.get("content") or ""))]
        if kind == "tool_use":
            return [
                hs.ToolUse(
                    str(obj.get("tool_id", "")),
                    str(obj.get("tool_name", "")),
                    dict(obj.get("parameters") or {}),
                )
            ]
        if kind == "tool_result":
            error = obj.get("error")
            output = str(obj.get("output") or "")
            if error:
                output = (output + "\n" if output else "") + str(
                    error.get("message") if isinstance(error, dict) else error
                )
            return [
                hs.ToolResult(str(obj.get("tool_id", "")), output, obj.get("status") != "success")
            ]
        if kind == "error":
            return [hs.Note(str(obj.get("message") or obj))]
        if kind == "result":
            stats = obj.get("stats") or {}
            usage = {
                k: v
                for k, v in stats.items()
                if k in ("input_tokens", "output_tokens", "total_tokens", "cached")
            }
            ok = obj.get("status") == "success"
            error = obj.get("error")
            message = (
                (error.get("message") if isinstance(error, dict) else error) if error else None
            )
            return [
                hs.Usage(_ints(usage)),
                hs.Finished(
                    ok, "end_turn" if ok else "error", None if ok else str(message or "failed")
                ),
            ]
        return []


# ---------------------------------------------------------------------- any ACP agent


class AcpAdapter(Adapter):
    """An ACP agent of unknown provider: each provider's base URL variable is pointed at its own
    route of the proxy (``ACP_ROUTES``), each route forwarding to that provider's endpoint."""

    kind = "acp"
    default_command = ()
    package = ""
    upstream_env = "ANTHROPIC_BASE_URL"
    upstream_default = "https://api.anthropic.com"

    def argv(self, command: list[str], turn: TurnRequest) -> list[str]:
        return list(command)

    def env(self, turn: TurnRequest, environ: Mapping[str, str]) -> dict[str, str]:
        env = {variable: f"{turn.proxy_url}/{route}" for route, (variable, _) in ACP_ROUTES.items()}
        # Claude-based agents: as for Claude Code itself.
        env.update(ClaudeAdapter().env(turn, environ))
        env["ANTHROPIC_BASE_URL"] = f"{turn.proxy_url}/a"
        env["GEMINI_CLI_TRUST_WORKSPACE"] = "true"
        return env

    def decode(self, obj: dict[str, Any]) -> list[hs.HarnessEvent]:
        return []  # its stream is ACP (coder_es.harness.acp)


ACP_ROUTES: dict[str, tuple[str, str]] = {
    "a": ("ANTHROPIC_BASE_URL", "https://api.anthropic.com"),
    "o": ("OPENAI_BASE_URL", "https://api.openai.com/v1"),
    "g": ("GOOGLE_GEMINI_BASE_URL", "https://generativelanguage.googleapis.com"),
}


ADAPTERS: dict[str, type[Adapter]] = {
    "acp": AcpAdapter,
    "claude-code": ClaudeAdapter,
    "codex": CodexAdapter,
    "gemini": GeminiAdapter,
}


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return "" if content is None else json.dumps(content)


def _ints(usage: Mapping[str, Any]) -> dict[str, int]:
    return {
        k: int(v)
        for k, v in usage.items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }
