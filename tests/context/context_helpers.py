"""Sessions written through the real Session aggregate and application, as the loop records them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

from coder_es.application import CoderApp
from coder_es.domain.session import Session
from coder_es.providers.types import ModelRequest
from coder_es.store.config import StoreConfig
from projections.context import ContextSettings

SETTINGS = ContextSettings(
    model="test-model",
    system="You are a careful coding agent.",
    tools=[
        {
            "name": "read",
            "description": "Read a file",
            "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
        }
    ],
    instructions="# Instructions from AGENTS.md\nRun the tests before you finish.",
)


def open_app(tmp: Path | None = None, backend: str = "popo") -> CoderApp:
    path = tmp / "store" if tmp is not None else Path(".")
    return CoderApp(StoreConfig(backend=backend, path=path))


@dataclass
class Recorder:
    """Appends the events of turns to one session, saving after every command."""

    app: CoderApp
    session_id: UUID
    calls: int = 0
    nodes: list[str] = field(default_factory=list)

    @classmethod
    def start(cls, app: CoderApp, workspace: str = "/ws") -> Recorder:
        session = app.start_session(workspace=workspace, model="test-model")
        return cls(app, session.id)

    def _do(self, command: Any) -> Any:
        return self.app.update(self.session_id, command)

    def user(self, text: str) -> str:
        node: str = self._do(lambda s: s.add_user_message(text))
        self.nodes.append(node)
        return node

    def answer(self, text: str, thinking: str | None = None) -> str:
        blocks: list[dict[str, Any]] = []
        if thinking is not None:
            blocks.append({"type": "thinking", "thinking": thinking, "signature": "sig"})
        blocks.append({"type": "text", "text": text})
        return self._respond(blocks, "end_turn")

    def _respond(self, blocks: list[dict[str, Any]], stop: str) -> str:
        node: str = self._do(
            lambda s: s.record_model_response(
                blocks=blocks, stop_reason=stop, usage={}, provider="scripted", model="m"
            )
        )
        self.nodes.append(node)
        return node

    def step(
        self,
        calls: list[tuple[str, dict[str, Any], str]],
        text: str = "",
        *,
        errors: frozenset[int] = frozenset(),
        files: dict[int, list[tuple[str, bytes, str]]] | None = None,
        answered: int | None = None,
    ) -> list[str]:
        """A model response calling tools, then their results (the first ``answered`` only).

        ``files[i]``: (path, content, "read" | "edit") recorded for call i before its result.
        """
        ids = []
        blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        for name, args, _ in calls:
            self.calls += 1
            call_id = f"toolu_{self.calls:05d}"
            ids.append(call_id)
            blocks.append({"type": "tool_use", "id": call_id, "name": name, "input": args})
        made = [self._respond(blocks, "tool_use")]
        upto = len(calls) if answered is None else answered
        for i, (name, _, output) in enumerate(calls[:upto]):
            call_id = ids[i]
            recorded = (files or {}).get(i, [])

            def record(
                s: Session,
                i: int = i,
                call_id: str = call_id,
                name: str = name,
                output: str = output,
                recorded: list[Any] = recorded,
            ) -> str:
                for path, content, how in recorded:
                    digest = self.app.blobs.put(content)
                    if how == "read":
                        s.observe_file(
                            path=path, hash=digest, size=len(content), tool_use_id=call_id
                        )
                    else:
                        s.apply_edit(
                            path=path,
                            base=None,
                            disk=None,
                            proposed=digest,
                            result=digest,
                            outcome="direct",
                            tool_use_id=call_id,
                        )
                return s.complete_tool_call(
                    tool_use_id=call_id, name=name, output=output, is_error=i in errors
                )

            node: str = self._do(record)
            made.append(node)
        self.nodes.extend(made[1:])
        return made

    def compact(self, covers: list[str], summary: str, by: str = "fallback") -> str:
        node: str = self._do(
            lambda s: s.compact_context(covers=covers, summary=summary, produced_by=by)
        )
        self.nodes.append(node)
        return node

    def checkout(self, node: str | None) -> None:
        self._do(lambda s: s.move_head(node, reason="checkout"))

    def events(self) -> list[Any]:
        return self.app.session_events(self.session_id)


def pairing_problems(request: ModelRequest) -> list[str]:
    """Ways the messages break the tool_use / tool_result rules providers enforce."""
    problems: list[str] = []
    msgs = request.messages
    if msgs and msgs[0]["role"] != "user":
        problems.append("the first message is not from the user")
    for i, m in enumerate(msgs):
        if i and msgs[i - 1]["role"] == m["role"]:
            problems.append(f"messages {i - 1} and {i} have the same role")
        blocks = m["content"]
        uses = [b["id"] for b in blocks if b.get("type") == "tool_use"]
        results = [b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"]
        if m["role"] == "assistant" and results:
            problems.append(f"message {i}: tool_result in an assistant message")
        if m["role"] == "user":
            kinds = [b.get("type") for b in blocks]
            if "tool_result" in kinds and kinds.index("tool_result") != 0:
                problems.append(f"message {i}: tool_result blocks are not first")
            if kinds.count("tool_result") and any(
                k == "tool_result"
                for k in kinds[kinds.index("tool_result") :][
                    next((j for j, k in enumerate(kinds) if k != "tool_result"), len(kinds)) :
                ]
            ):
                problems.append(f"message {i}: tool_result after other blocks")
            prev = msgs[i - 1] if i else None
            called = (
                {b["id"] for b in prev["content"] if b.get("type") == "tool_use"}
                if prev is not None
                else set()
            )
            for r in results:
                if r not in called:
                    problems.append(f"message {i}: result {r} has no call just before it")
        if uses:
            nxt = msgs[i + 1] if i + 1 < len(msgs) else None
            answered = (
                {b.get("tool_use_id") for b in nxt["content"] if b.get("type") == "tool_result"}
                if nxt is not None
                else set()
            )
            for u in uses:
                if u not in answered:
                    problems.append(f"message {i}: call {u} has no result in the next message")
    return problems
