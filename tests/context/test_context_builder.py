"""The request a session's events give: layout, budget, files, related code, determinism."""

from __future__ import annotations

from pathlib import Path

import pytest
from context_helpers import SETTINGS, Recorder, open_app, pairing_problems

from projections.context import (
    PART_NAMES,
    ContextBudgetError,
    ContextBuilder,
    ContextConfig,
    ContextConfigError,
    ContextState,
    graph_related,
    request_tokens,
)
from projections.depgraph import DepGraph

A_PY = b"from b import helper\n\ndef f():\n    return helper() + 1\n"


def _session() -> tuple[Recorder, list[str]]:
    r = Recorder.start(open_app())
    r.user("Fix the failing test in a.py")
    r.step(
        [("read", {"path": "a.py"}, A_PY.decode())],
        files={0: [("a.py", A_PY, "read")]},
    )
    r.step(
        [("edit", {"path": "a.py", "old_string": "+ 1", "new_string": "+ 2"}, "edited a.py")],
        files={0: [("a.py", A_PY.replace(b"+ 1", b"+ 2"), "edit")]},
    )
    r.step([("bash", {"command": "pytest -q"}, "F" * 40_000)], text="Running the tests.")
    r.answer("Fixed: f adds 2 now.")
    last = r.user("Thanks. Now add a docstring.")
    return r, [last]


def test_system_and_instructions_come_first_and_every_part_is_counted() -> None:
    r, _ = _session()
    built = ContextBuilder(SETTINGS, blobs=r.app.blobs).build(r.events(), budget=100_000)
    request = built.request
    assert request.system.startswith(SETTINGS.system)
    assert request.system.endswith("Run the tests before you finish.")
    assert request.tools == SETTINGS.tools
    assert [p.name for p in built.parts] == list(PART_NAMES)
    assert sum(p.tokens for p in built.parts) == built.tokens == request_tokens(request)
    assert built.part("instructions").tokens > 0 and built.part("files").items == 1
    assert request.messages[0]["content"][0]["text"] == "Fix the failing test in a.py"
    assert request.messages[-1]["content"][0]["text"] == "Thanks. Now add a docstring."
    assert not pairing_problems(request)
    assert not built.needs_compaction


def test_long_tool_output_is_cut_with_a_pointer_to_where_it_is_whole() -> None:
    r, _ = _session()
    built = ContextBuilder(SETTINGS, blobs=r.app.blobs).build(r.events(), budget=100_000)
    results = [
        b
        for m in built.request.messages
        for b in m["content"]
        if b.get("type") == "tool_result" and b["content"].startswith("FFFF")
    ]
    (result,) = results
    assert len(result["content"]) < 40_000
    assert "left out of the context; the full output is in node" in result["content"]


def test_edited_file_is_sent_as_it_is_now_and_a_read_sent_whole_is_not_repeated() -> None:
    r, _ = _session()
    built = ContextBuilder(SETTINGS, blobs=r.app.blobs).build(r.events(), budget=100_000)
    files_text = built.request.messages[-1]["content"][-1]["text"]
    assert "=== a.py" in files_text and "return helper() + 2" in files_text
    assert [f.path for f in built.files] == ["a.py"]

    # Only a read: its result is in the window whole, so the file is not sent twice.
    r2 = Recorder.start(open_app())
    r2.user("look at a.py")
    r2.step([("read", {"path": "a.py"}, A_PY.decode())], files={0: [("a.py", A_PY, "read")]})
    built2 = ContextBuilder(SETTINGS, blobs=r2.app.blobs).build(r2.events(), budget=100_000)
    assert built2.files == () and built2.part("files").tokens == 0


def test_files_are_kept_most_recently_used_first_within_their_share() -> None:
    r = Recorder.start(open_app())
    r.user("read everything")
    for i in range(12):
        body = (f"# file {i}\n" + "x = 1\n" * 200).encode()
        r.step([("read", {"path": f"f{i}.py"}, "ok")], files={0: [(f"f{i}.py", body, "read")]})
        edited = {0: [(f"f{i}.py", body + b"#", "edit")]}
        r.step([("edit", {"path": f"f{i}.py"}, "ok")], files=edited)
    config = ContextConfig(files_share=0.3)
    built = ContextBuilder(SETTINGS, config=config, blobs=r.app.blobs).build(
        r.events(), budget=4_000
    )
    paths = [f.path for f in built.files]
    assert paths and paths[0] == "f11.py"
    assert paths == [f"f{i}.py" for i in range(11, 11 - len(paths), -1)]
    assert len(paths) < 12  # the share cannot hold all twelve: the oldest are left out
    assert built.part("files").tokens <= int((4_000 - 54) * 0.3)
    assert built.tokens <= 4_000


def test_related_code_comes_from_the_dependency_graph(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.py").write_bytes(A_PY)
    (ws / "b.py").write_text("from c import base\n\ndef helper():\n    return base()\n")
    (ws / "c.py").write_text("def base():\n    return 40\n")
    (ws / "unrelated.py").write_text("def lonely():\n    pass\n")
    graph = DepGraph.build(ws)
    r, _ = _session()
    builder = ContextBuilder(SETTINGS, blobs=r.app.blobs, related=graph_related(graph))
    built = builder.build(r.events(), budget=100_000)
    assert "b.py" in built.related and "unrelated.py" not in built.related
    text = built.request.messages[-1]["content"][-1]["text"]
    assert text.startswith("Code related to those files") and "def helper" in text
    assert built.part("related").tokens > 0
    assert built.tokens == request_tokens(built.request)


def test_identical_events_give_byte_identical_requests() -> None:
    r, _ = _session()
    events = r.events()
    one = ContextBuilder(SETTINGS, blobs=r.app.blobs).build(events, budget=1_500)
    # Incrementally: apply events one at a time, building at every head on the way.
    state = ContextState()
    builder = ContextBuilder(SETTINGS, blobs=r.app.blobs)
    for event in events:
        state.apply(event)
        if state.head is not None:
            builder.build(state, budget=1_500)
    two = builder.build(state, budget=1_500)
    assert one.canonical_json().encode() == two.canonical_json().encode()
    assert one.parts == two.parts


def test_a_budget_below_the_fixed_parts_is_a_clear_error() -> None:
    r, _ = _session()
    with pytest.raises(ContextBudgetError, match="too small"):
        ContextBuilder(SETTINGS).build(r.events(), budget=20)
    with pytest.raises(ContextConfigError):
        ContextConfig(files_share=0.5, summary_share=0.5)


def test_a_checked_out_branch_sends_only_its_own_path() -> None:
    r = Recorder.start(open_app())
    first = r.user("first question")
    r.answer("first answer")
    r.user("abandoned question")
    r.answer("abandoned answer")
    r.checkout(first)
    r.user("better question")
    state = ContextState.from_events(r.events())
    built = ContextBuilder(SETTINGS).build(state, budget=10_000)
    texts = [b.get("text") for m in built.request.messages for b in m["content"]]
    assert texts == ["first question", "better question"]  # same role: one user message
    assert len(built.request.messages) == 1
    # Building the other branch's head afterwards gives its own path back.
    other = ContextBuilder(SETTINGS).build(state, "5", budget=10_000)
    assert [b.get("text") for m in other.request.messages for b in m["content"]] == [
        "first question",
        "first answer",
        "abandoned question",
        "abandoned answer",
    ]


def test_unanswered_tool_calls_are_not_sent() -> None:
    r = Recorder.start(open_app())
    r.user("two reads")
    r.step([("read", {"path": "a"}, "A"), ("read", {"path": "b"}, "B")], answered=1)
    built = ContextBuilder(SETTINGS).build(r.events(), budget=10_000)
    assert not pairing_problems(built.request)
    uses = [
        b["id"] for m in built.request.messages for b in m["content"] if b.get("type") == "tool_use"
    ]
    assert uses == ["toolu_00001"]


def test_a_small_budget_condenses_older_turns_and_keeps_the_newest_whole() -> None:
    r = Recorder.start(open_app())
    for i in range(30):
        r.user(f"question {i}: please do task number {i}")
        r.step([("bash", {"command": f"make t{i}"}, "ok\n" * 50)])
        r.answer(f"answer {i}")
    built = ContextBuilder(SETTINGS).build(r.events(), budget=1_200)
    assert built.tokens <= 1_200 and built.tokens == request_tokens(built.request)
    assert built.needs_compaction and built.condensed_units > 0
    first = built.request.messages[0]["content"][0]["text"]
    assert first.startswith("Earlier conversation, condensed")
    assert "Tools: bash make t" in first  # fallback lines for what was left out
    assert built.request.messages[-1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "answer 29"}],
    }
    assert not pairing_problems(built.request)
