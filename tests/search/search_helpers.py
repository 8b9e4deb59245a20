"""Sessions with known text, recorded through the real application."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from coder_es.application import CoderApp


def record_turn(
    app: CoderApp,
    session_id: UUID,
    *,
    user: str,
    answer: str,
    command: str | None = None,
    output: str = "",
    output_blob: bytes | None = None,
    changed: tuple[str, ...] = (),
) -> None:
    """A user message, a model response and (with ``command``) one bash call and its result."""

    def turn(s: Any) -> None:
        s.add_user_message(user)
        blocks: list[dict[str, Any]] = [{"type": "text", "text": answer}]
        if command is not None:
            blocks.append({"type": "tool_use", "id": "t1", "name": "bash", "input": {}})
        node = s.record_model_response(
            blocks=blocks, stop_reason="tool_use", usage={}, provider="scripted", model="m"
        )
        if command is None:
            return
        s.request_tool_call(node=node, tool_use_id="t1", name="bash", input={"command": command})
        blob = app.blobs.for_session(session_id).put(output_blob) if output_blob else None
        s.complete_tool_call(
            tool_use_id="t1",
            name="bash",
            # Like the loop: the event keeps the start of an output whose whole is in a blob.
            output=output_blob[:100].decode("utf-8", "replace") if output_blob else output,
            output_blob=blob,
            files_changed=[{"path": p, "before": None, "after": None} for p in changed],
        )

    app.update(session_id, turn)


def new_session(app: CoderApp, title: str = "") -> UUID:
    return app.start_session(workspace="/tmp/ws", title=title).id
