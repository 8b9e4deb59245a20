"""The agent loop on the context projection: a "context too long" refusal is compacted and retried.

Active once ``coder_es.agent.runner`` builds its requests with ``projections.context`` (the
integration change of issue 9); skipped before that.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "agent"))

from agent_helpers import collect, make_harness, text, turn

from coder_es.agent import runner

pytestmark = pytest.mark.skipif(
    "plan_compaction" not in inspect.getsource(runner),
    reason="the agent loop does not build its requests with projections.context yet",
)

TOO_LONG = {
    "error": {
        "type": "invalid_request_error",
        "message": "prompt is too long: maximum context length exceeded",
    }
}


def test_context_too_long_is_compacted_recorded_and_retried(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    turns = [turn(text(f"answer {i}")) for i in range(3)] + [TOO_LONG, turn(text("final"))]
    handle = h.start(turns)
    for i in range(3):
        collect(handle, f"question {i}")
    collect(handle, "question 3")
    kinds = h.kinds(handle)
    assert "ErrorRecorded" in kinds and "ContextCompacted" in kinds
    (compacted,) = h.of(handle, "ContextCompacted")
    assert compacted.produced_by == "fallback" and "question 0" in compacted.summary
    last = h.of(handle, "ModelResponded")[-1]
    assert last.blocks == [{"type": "text", "text": "final"}]
    assert last.parent == str(compacted.originator_version)
    # The retried request no longer holds the covered turns, but keeps the newest ones.
    request = h.providers[-1].requests[-1]
    texts = [b.get("text") for m in request.messages for b in m["content"]]
    assert "answer 0" not in texts and "question 1" not in texts
    assert texts[0].startswith("[Summary of earlier turns")
    assert texts[-3:] == ["question 2", "answer 2", "question 3"]
