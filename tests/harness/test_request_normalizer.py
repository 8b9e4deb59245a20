"""Live replay matches a harness's model request to its recording by a digest of the body with
the volatile parts normalized (docs/harness.md). These are the parts found to vary between two
runs of the same CLI on the same conversation."""

from __future__ import annotations

import json

from coder_es.harness.serve import RequestNormalizer


def _codex_request(started_ms: int, text: str = "hello") -> bytes:
    # Codex 0.171.0's Responses request: ``client_metadata`` carries a JSON text of the turn's
    # metadata, including the time the turn started (found by the slow replay test).
    turn = {"turn_id": "t", "turn_started_at_unix_ms": started_ms, "nested": {}}
    compact = (",", ":")  # as on the wire
    return json.dumps(
        {
            "model": "gpt-5",
            "client_metadata": {
                "thread_id": "th",
                "x-codex-turn-metadata": json.dumps(turn, separators=compact),
            },
            "input": [{"role": "user", "content": [{"type": "input_text", "text": text}]}],
        },
        separators=compact,
    ).encode()


def test_codex_turn_metadata_with_its_start_time_is_not_part_of_the_match() -> None:
    n = RequestNormalizer.for_paths("codex", "/tmp/ws")
    assert n.digest(_codex_request(1795847902471)) == n.digest(_codex_request(1795847905765))
    assert json.loads(n.body(_codex_request(1)))["client_metadata"] is None


def test_a_different_conversation_still_differs() -> None:
    n = RequestNormalizer.for_paths("codex", "/tmp/ws")
    assert n.digest(_codex_request(1, "hello")) != n.digest(_codex_request(1, "goodbye"))
