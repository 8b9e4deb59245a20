"""Compaction: what a summary covers, what stays intact, and the fallback summarizer."""

from __future__ import annotations

from context_helpers import SETTINGS, Recorder, open_app, pairing_problems

from projections.context import (
    ContextBuilder,
    ContextState,
    compaction_transcript,
    plan_compaction,
    request_tokens,
)


def _turns(r: Recorder, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        r.user(f"task {i}: make the widget number {i} blue\nsecond line is not kept")
        r.step(
            [("edit", {"path": f"w{i}.py"}, "done"), ("bash", {"command": "pytest"}, "1 failed")],
            errors=frozenset({1}),
            files={0: [(f"w{i}.py", f"blue = {i}\n".encode(), "edit")]},
        )
        r.answer(f"Widget {i} is blue now.")


def _messages_after(built_messages: list[dict], text: str) -> list[dict]:
    for i, m in enumerate(built_messages):
        if any(b.get("text") == text for b in m["content"]):
            return built_messages[i:]
    raise AssertionError(f"{text!r} not sent")


def test_compaction_keeps_the_most_recent_turns_intact() -> None:
    r = Recorder.start(open_app())
    _turns(r, 6)
    builder = ContextBuilder(SETTINGS, blobs=r.app.blobs)
    before = builder.build(r.events(), budget=100_000)
    plan = plan_compaction(r.events(), keep_turns=2)
    assert plan is not None
    r.compact(list(plan.covers), plan.summary)
    after = builder.build(r.events(), budget=100_000)

    ask = "task 4: make the widget number 4 blue\nsecond line is not kept"
    kept_before = _messages_after(before.request.messages, ask)
    kept_after = _messages_after(after.request.messages, ask)
    # The last two turns are sent exactly as before: the summary joins the first kept user
    # message (same role), and the files note is on the last one.
    assert kept_after[0]["content"][-1] == kept_before[0]["content"][-1]
    assert kept_after[1:-1] == kept_before[1:-1] and len(kept_after) == len(kept_before)
    assert kept_after[-1]["content"][0] == kept_before[-1]["content"][0]
    # Everything older is gone, replaced by the summary at the start.
    first = after.request.messages[0]["content"][0]["text"]
    assert first.startswith(f"[Summary of earlier turns, node {r.nodes[-1]}]")
    assert "task 0" not in str(after.request.messages[1:])
    assert after.summaries == (r.nodes[-1],)
    assert after.tokens < before.tokens
    assert not pairing_problems(after.request)
    # The covered nodes are the first four turns, in path order, each turn whole.
    covered = {int(n) for n in plan.covers}
    assert plan.kept_from == _node_of(r, ask)
    assert all(int(n) < int(plan.kept_from) for n in covered)


def _node_of(r: Recorder, text: str) -> str:
    state = ContextState.from_events(r.events())
    for num, node in state.nodes.items():
        if any(b.get("text") == text for b in node.blocks):
            return str(num)
    raise AssertionError(text)


def test_fallback_summary_lists_asks_calls_failures_changes_and_answers() -> None:
    r = Recorder.start(open_app())
    _turns(r, 3)
    plan = plan_compaction(r.events(), keep_turns=1)
    assert plan is not None and plan.produced_by == "fallback"
    s = plan.summary
    assert "User: task 0: make the widget number 0 blue" in s
    assert "second line" not in s
    assert "Tools: edit w0.py; bash pytest (failed)" in s
    assert "changed: w1.py" in s
    assert "Assistant: Widget 1 is blue now." in s
    assert "task 2" not in s  # the kept turn


def test_a_second_compaction_folds_the_first_summary_in() -> None:
    r = Recorder.start(open_app())
    _turns(r, 4)
    plan1 = plan_compaction(r.events(), keep_turns=1)
    assert plan1 is not None
    first_summary = r.compact(list(plan1.covers), "MODEL SUMMARY ONE", by="model")
    _turns(r, 3, start=4)
    plan2 = plan_compaction(r.events(), keep_turns=1)
    assert plan2 is not None and first_summary in plan2.covers
    assert "MODEL SUMMARY ONE" in plan2.summary  # carried over
    second = r.compact(list(plan2.covers), plan2.summary)
    built = ContextBuilder(SETTINGS).build(r.events(), budget=100_000)
    assert built.summaries == (second,)
    assert str(built.request.messages).count("MODEL SUMMARY ONE") == 1  # inside the new one
    assert "task 6" in str(built.request.messages)
    assert not pairing_problems(built.request)


def test_one_long_turn_is_compacted_step_by_step_keeping_the_ask() -> None:
    r = Recorder.start(open_app())
    ask = r.user("refactor everything")
    for i in range(10):
        r.step([("bash", {"command": f"step {i}"}, "out " * 100)])
    plan = plan_compaction(r.events(), keep_turns=2, keep_steps=3)
    assert plan is not None and ask not in plan.covers
    r.compact(list(plan.covers), plan.summary)
    built = ContextBuilder(SETTINGS).build(r.events(), budget=100_000)
    first = built.request.messages[0]["content"]
    assert first[0]["text"] == "refactor everything"
    assert first[1]["text"].startswith("[Summary of earlier turns")
    commands = [
        b["input"]["command"]
        for m in built.request.messages
        for b in m["content"]
        if b.get("type") == "tool_use"
    ]
    assert commands == ["step 7", "step 8", "step 9"]
    assert not pairing_problems(built.request)


def test_nothing_to_compact_gives_none() -> None:
    r = Recorder.start(open_app())
    _turns(r, 2)
    assert plan_compaction(r.events(), keep_turns=2, keep_steps=10) is None


def test_context_too_long_compact_and_retry_fits_a_stable_prefix() -> None:
    """What the loop does when the provider refuses: plan, record, rebuild."""
    r = Recorder.start(open_app())
    _turns(r, 40)
    builder = ContextBuilder(SETTINGS, blobs=r.app.blobs)
    budget = 2_000
    built = builder.build(r.events(), budget=budget)
    assert built.needs_compaction  # the builder had to shed turns no summary covers
    plan = plan_compaction(r.events())
    assert plan is not None
    r.compact(list(plan.covers), plan.summary)
    retried = builder.build(r.events(), budget=budget)
    assert not retried.needs_compaction
    assert retried.tokens <= budget and retried.tokens == request_tokens(retried.request)
    # The next step keeps the same leading messages: the prefix is stable for caching.
    r.step([("bash", {"command": "ls"}, "a b c")])
    nxt = builder.build(r.events(), budget=budget)
    assert nxt.request.messages[:2] == retried.request.messages[:2]


def test_transcript_for_a_model_summary_names_calls_and_results() -> None:
    r = Recorder.start(open_app())
    _turns(r, 2)
    plan = plan_compaction(r.events(), keep_turns=1)
    assert plan is not None
    text = compaction_transcript(r.events(), plan.covers)
    assert "User: task 0" in text and 'Tool call edit: {"path": "w0.py"}' in text
    assert "Result of bash (error):\n1 failed" in text
