"""The scripted provider: turns from a file or a list, streamed like a real provider."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from provider_wire import Sleeps, collect, collect_until_error, request, run

from coder_es.providers import (
    Finish,
    MessageStart,
    OverloadedError,
    ProviderConfigError,
    ScriptedProvider,
    ScriptExhaustedError,
    StreamFailed,
    TextDelta,
    ThinkingDelta,
    ToolCallComplete,
    ToolCallDelta,
    ToolCallStart,
    assemble,
)

TURNS: list[dict[str, Any]] = [
    {
        "blocks": [
            {
                "type": "thinking",
                "thinking": "Read the file before editing it.",
                "signature": "sig1",
            },
            {"type": "text", "text": "Let me look at the README first."},
            {"type": "tool_use", "name": "read", "input": {"path": "README.md"}},
        ],
        "usage": {"input_tokens": 120, "output_tokens": 30, "cache_read_tokens": 100},
        "delay_ms": 250,
    },
    {"blocks": [{"type": "text", "text": "Done."}]},
]


def test_turns_stream_as_deltas_then_complete_blocks() -> None:
    sleeps = Sleeps()
    p = ScriptedProvider(TURNS, sleep=sleeps, chunk_chars=8)
    events = run(collect(p.stream(request())))
    assert sleeps.delays == [0.25]
    assert isinstance(events[0], MessageStart)
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert text == "Let me look at the README first."
    assert sum(isinstance(e, TextDelta) for e in events) > 1
    assert [e.signature for e in events if isinstance(e, ThinkingDelta) and e.signature] == ["sig1"]
    kinds = [type(e) for e in events]
    assert kinds.index(ToolCallStart) < kinds.index(ToolCallDelta) < kinds.index(ToolCallComplete)
    finish = events[-1]
    assert isinstance(finish, Finish) and finish.stop_reason == "tool_use"
    assert finish.usage == {
        "input_tokens": 120,
        "output_tokens": 30,
        "cache_read_tokens": 100,
        "cache_write_tokens": 0,
    }


def test_complete_gives_blocks_with_deterministic_tool_ids() -> None:
    p = ScriptedProvider(TURNS, sleep=Sleeps())
    first = run(p.complete(request()))
    assert first.content[2] == {
        "type": "tool_use",
        "id": "toolu_scripted_0_2",
        "name": "read",
        "input": {"path": "README.md"},
    }
    assert first.content[0]["signature"] == "sig1"
    second = run(p.complete(request(messages=[{"role": "user", "content": "go"}])))
    assert second.text == "Done." and second.stop_reason == "end_turn"
    assert [r.messages[0]["content"] for r in p.requests] == ["Hello", "go"]
    assert p.remaining == 0


def test_running_out_is_a_clear_error() -> None:
    p = ScriptedProvider(TURNS[1:], source="demo.json", sleep=Sleeps())
    run(p.complete(request()))
    events, error = run(collect_until_error(p.stream(request())))
    assert isinstance(error, ScriptExhaustedError)
    assert "demo.json has 1 turn(s)" in str(error) and "request 2" in str(error)
    assert isinstance(events[-1], StreamFailed)


def test_error_turn_raises_the_typed_error() -> None:
    p = ScriptedProvider(
        [{"error": {"type": "overloaded_error", "message": "Overloaded"}}], sleep=Sleeps()
    )
    with pytest.raises(OverloadedError, match="Overloaded"):
        run(p.complete(request()))


def test_files_json_and_jsonl(tmp_path: Path) -> None:
    as_json = tmp_path / "turns.json"
    as_json.write_text(json.dumps({"turns": TURNS}))
    as_jsonl = tmp_path / "turns.jsonl"
    as_jsonl.write_text("\n".join(json.dumps(t) for t in TURNS) + "\n")
    for path in (as_json, as_jsonl):
        p = ScriptedProvider.from_file(path, sleep=Sleeps())
        responses = [run(assemble(p.stream(request()))) for _ in range(2)]
        assert [r.stop_reason for r in responses] == ["tool_use", "end_turn"]


@pytest.mark.parametrize(
    ("turns", "message"),
    [
        ([{"blocks": []}], "turn 0: 'blocks' must be a non-empty list"),
        ([{"blocks": [{"text": "no type"}]}], r"turn 0.blocks\[0\]: a block must be an object"),
        (
            [TURNS[1], {"blocks": [{"type": "tool_use", "input": {}}]}],
            "turn 1.*needs a string 'name'",
        ),
        (
            [{"blocks": [{"type": "text", "text": "x"}], "stop_reason": "done"}],
            "stop_reason 'done'",
        ),
        (
            [{"blocks": [{"type": "text", "text": "x"}], "delay": 5}],
            r"unknown turn keys \['delay'\]",
        ),
        ([{"error": "boom"}], "error needs a 'message'"),
    ],
)
def test_bad_scripts_name_the_turn(turns: list[object], message: str) -> None:
    with pytest.raises(ProviderConfigError, match=message):
        ScriptedProvider(turns)  # type: ignore[arg-type]


def test_unreadable_or_invalid_file(tmp_path: Path) -> None:
    with pytest.raises(ProviderConfigError, match="cannot read script"):
        ScriptedProvider.from_file(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ProviderConfigError, match=r"bad\.json is not valid JSON"):
        ScriptedProvider.from_file(bad)
