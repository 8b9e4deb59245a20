"""A fake model server on 127.0.0.1 that speaks the three wire formats the harness CLIs use.

- Anthropic Messages (``POST .../v1/messages``, SSE when ``stream`` is set): Claude Code;
- OpenAI Responses (``POST .../responses``, SSE): Codex;
- Gemini (``POST .../models/M:streamGenerateContent?alt=sse`` and the one ``:generateContent``
  routing call Gemini CLI makes first): Gemini CLI.

It is stateless: the step of the script it answers is the number of tool results the request
carries (each CLI sends the whole history every time), so any number of sessions, resumes and
side requests (titles, routing) can share one server. A script is a list of abstract steps,
``("write", path, content)`` or ``("shell", command)``, then a final text answer; each wire
maps them to the CLI's own tool names, found in the request's tool list. ``latency_s`` delays
every answer (the bench's 50 ms model).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Step = tuple[str, ...]

FINAL_TEXT = "All done: the notes are written and made.txt exists (FAKE-ANSWER-7Q)."


@dataclass
class Script:
    steps: Sequence[Step]
    final: str = FINAL_TEXT
    latency_s: float = 0.0


@dataclass
class FakeModel:
    script: Script
    requests: list[dict[str, Any]] = field(default_factory=list)
    on_request: Callable[[int, dict[str, Any]], None] | None = None
    """Called with (number of requests so far, body) before each answer: a test's user acts
    while the harness's turn is running."""
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeModel:
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body are two writes: without this, Nagle and delayed ACKs add 40 ms.
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                model.requests.append({"method": "GET", "path": self.path})
                if self.path.rstrip("/").endswith("/models"):
                    self._json(200, {"data": [], "models": []})
                    return
                self._json(404, {"error": {"message": "not found"}})

            def do_HEAD(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else self._chunked()
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                model.requests.append({"method": "POST", "path": self.path, "body": body})
                if model.on_request is not None:
                    model.on_request(len(model.requests), body)
                if model.script.latency_s:
                    time.sleep(model.script.latency_s)
                path = self.path.split("?")[0]
                if path.endswith("/messages"):
                    self._anthropic(body)
                elif path.endswith("/responses"):
                    self._responses(body)
                elif ":streamGenerateContent" in path:
                    self._gemini(body, stream=True)
                elif ":generateContent" in path:
                    self._gemini(body, stream=False)
                elif path.endswith(":countTokens"):
                    self._json(200, {"totalTokens": 10})
                else:
                    self._json(404, {"error": {"message": f"no route {path}"}})

            def _chunked(self) -> bytes:
                out = b""
                while True:
                    size = int(self.rfile.readline().strip() or b"0", 16)
                    if size == 0:
                        self.rfile.readline()
                        return out
                    out += self.rfile.read(size)
                    self.rfile.readline()

            def _json(self, status: int, obj: Any) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _sse(self, events: list[tuple[str | None, Any]]) -> None:
                parts = []
                for name, obj in events:
                    head = f"event: {name}\n" if name else ""
                    parts.append(f"{head}data: {json.dumps(obj)}\n\n")
                data = "".join(parts).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            # ---------------------------------------------------------- Anthropic

            def _anthropic(self, body: dict[str, Any]) -> None:
                tools = [t.get("name") for t in body.get("tools") or []]
                done = sum(
                    1
                    for m in body.get("messages") or []
                    if isinstance(m.get("content"), list)
                    for b in m["content"]
                    if isinstance(b, dict) and b.get("type") == "tool_result"
                )
                step = model.step(done) if "Bash" in tools else None
                n = len(model.requests)
                if step is None:
                    text = model.script.final if tools else "Notes and a file"
                    content: dict[str, Any] = {"type": "text", "text": ""}
                    deltas = [{"type": "text_delta", "text": text}]
                    stop = "end_turn"
                else:
                    if step[0] == "write":
                        name, inp = "Write", {"file_path": step[1], "content": step[2]}
                    else:
                        name, inp = "Bash", {"command": step[1], "description": "run it"}
                    content = {
                        "type": "tool_use",
                        "id": f"toolu_{n:04d}",
                        "name": name,
                        "input": {},
                    }
                    deltas = [{"type": "input_json_delta", "partial_json": json.dumps(inp)}]
                    stop = "tool_use"
                usage = {"input_tokens": 100, "output_tokens": 20}
                message = {
                    "id": f"msg_{n:04d}",
                    "type": "message",
                    "role": "assistant",
                    "model": body.get("model", "claude-fake"),
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {**usage, "output_tokens": 1},
                }
                if not body.get("stream"):
                    full = dict(content)
                    if step is None:
                        full["text"] = deltas[0]["text"]
                    else:
                        full["input"] = json.loads(deltas[0]["partial_json"])
                    self._json(200, {**message, "content": [full], "stop_reason": stop})
                    return
                events: list[tuple[str | None, Any]] = [
                    ("message_start", {"type": "message_start", "message": message}),
                    (
                        "content_block_start",
                        {"type": "content_block_start", "index": 0, "content_block": content},
                    ),
                ]
                for d in deltas:
                    events.append(
                        (
                            "content_block_delta",
                            {"type": "content_block_delta", "index": 0, "delta": d},
                        )
                    )
                events += [
                    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                    (
                        "message_delta",
                        {
                            "type": "message_delta",
                            "delta": {"stop_reason": stop, "stop_sequence": None},
                            "usage": {"output_tokens": 20},
                        },
                    ),
                    ("message_stop", {"type": "message_stop"}),
                ]
                self._sse(events)

            # ---------------------------------------------------------- OpenAI Responses

            def _responses(self, body: dict[str, Any]) -> None:
                tools = {t.get("name") or t.get("type") for t in body.get("tools") or []}
                items = body.get("input") or []
                done = sum(
                    1
                    for i in items
                    if isinstance(i, dict) and str(i.get("type", "")).endswith("call_output")
                )
                step = model.step(done) if tools else None
                n = len(model.requests)
                rid = f"resp_{n:04d}"
                if step is None:
                    item: dict[str, Any] = {
                        "type": "message",
                        "id": f"msg_{n:04d}",
                        "role": "assistant",
                        "status": "completed",
                        "content": [
                            {"type": "output_text", "text": model.script.final, "annotations": []}
                        ],
                    }
                elif step[0] == "write" and "apply_patch" in tools:
                    patch = _add_file_patch(step[1], step[2])
                    item = {
                        "type": "custom_tool_call",
                        "id": f"ctc_{n:04d}",
                        "call_id": f"call_{n:04d}",
                        "name": "apply_patch",
                        "input": patch,
                        "status": "completed",
                    }
                else:
                    command = step[1] if step[0] == "shell" else _write_command(step[1], step[2])
                    name = "exec_command" if "exec_command" in tools else "shell"
                    args: dict[str, Any] = (
                        {"cmd": command}
                        if name == "exec_command"
                        else {"command": ["bash", "-lc", command]}
                    )
                    item = {
                        "type": "function_call",
                        "id": f"fc_{n:04d}",
                        "call_id": f"call_{n:04d}",
                        "name": name,
                        "arguments": json.dumps(args),
                        "status": "completed",
                    }
                usage = {
                    "input_tokens": 100,
                    "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens": 20,
                    "output_tokens_details": {"reasoning_tokens": 0},
                    "total_tokens": 120,
                }
                base = {"id": rid, "object": "response", "model": body.get("model", "gpt-fake")}
                events: list[tuple[str | None, Any]] = [
                    (
                        "response.created",
                        {
                            "type": "response.created",
                            "response": {**base, "status": "in_progress", "output": []},
                        },
                    ),
                    (
                        "response.output_item.added",
                        {"type": "response.output_item.added", "output_index": 0, "item": item},
                    ),
                ]
                if step is None:
                    events.append(
                        (
                            "response.output_text.delta",
                            {
                                "type": "response.output_text.delta",
                                "item_id": item["id"],
                                "output_index": 0,
                                "content_index": 0,
                                "delta": model.script.final,
                            },
                        )
                    )
                events += [
                    (
                        "response.output_item.done",
                        {"type": "response.output_item.done", "output_index": 0, "item": item},
                    ),
                    (
                        "response.completed",
                        {
                            "type": "response.completed",
                            "response": {
                                **base,
                                "status": "completed",
                                "output": [item],
                                "usage": usage,
                            },
                        },
                    ),
                ]
                self._sse(events)

            # ---------------------------------------------------------- Gemini

            def _gemini(self, body: dict[str, Any], *, stream: bool) -> None:
                decls = [
                    d.get("name")
                    for t in body.get("tools") or []
                    for d in t.get("functionDeclarations") or []
                ]
                done = sum(
                    1
                    for c in body.get("contents") or []
                    for p in c.get("parts") or []
                    if isinstance(p, dict) and "functionResponse" in p
                )
                usage = {
                    "promptTokenCount": 100,
                    "candidatesTokenCount": 20,
                    "totalTokenCount": 120,
                }
                if not decls:
                    # The routing call (or another side request): a JSON answer naming a model.
                    text = json.dumps(
                        {
                            "reasoning": "simple",
                            "model_choice": "flash",
                            "complexity_reasoning": "simple",
                            "complexity_score": 1,
                        }
                    )
                    part: dict[str, Any] = {"text": text}
                else:
                    step = model.step(done)
                    if step is None:
                        part = {"text": model.script.final}
                    elif step[0] == "write":
                        part = {
                            "functionCall": {
                                "name": "write_file",
                                "args": {"file_path": step[1], "content": step[2]},
                            }
                        }
                    else:
                        part = {
                            "functionCall": {
                                "name": "run_shell_command",
                                "args": {"command": step[1], "description": "run it"},
                            }
                        }
                chunk = {
                    "candidates": [
                        {
                            "content": {"role": "model", "parts": [part]},
                            "finishReason": "STOP",
                            "index": 0,
                        }
                    ],
                    "usageMetadata": usage,
                    "modelVersion": "gemini-fake",
                }
                if stream:
                    self._sse([(None, chunk)])
                else:
                    self._json(200, chunk)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # A client that went away mid-answer (a harness killed by a test): not worth a trace.
        self._server.handle_error = lambda request, address: None  # type: ignore[method-assign]
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def step(self, done: int) -> Step | None:
        steps = self.script.steps
        return steps[done] if done < len(steps) else None

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> FakeModel:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _add_file_patch(path: str, content: str) -> str:
    lines = "".join(f"+{line}\n" for line in content.splitlines())
    return f"*** Begin Patch\n*** Add File: {path}\n{lines}*** End Patch\n"


def _write_command(path: str, content: str) -> str:
    quoted = content.replace("'", "'\\''")
    return f"printf '%s' '{quoted}' > {path}"


def standard_script(workspace: str, *, absolute: bool = True, latency_s: float = 0.0) -> Script:
    """Write notes.md (the CLI's own write tool), run a command that creates made.txt, answer."""
    notes = f"{workspace}/notes.md" if absolute else "notes.md"
    return Script(
        steps=[
            ("write", notes, "# Notes\nwritten by the harness\n"),
            ("shell", "echo made > made.txt"),
        ],
        latency_s=latency_s,
    )


def _serve_forever() -> None:
    """``python fake_model.py``: serve an empty script (a text answer) until killed; prints the
    URL on the first line (the bench runs the model in its own process)."""
    import sys

    model = FakeModel(Script(steps=[])).start()
    print(model.url, flush=True)
    sys.stdin.read()
    model.stop()


if __name__ == "__main__":
    _serve_forever()
