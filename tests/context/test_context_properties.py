"""Properties over random sessions and budgets: the budget holds, pairs stay whole, and the
incremental projection builds the same bytes as one rebuilt from zero."""

from __future__ import annotations

from typing import Any

from context_helpers import SETTINGS, Recorder, open_app, pairing_problems
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections.context import (
    ContextBudgetError,
    ContextBuilder,
    ContextState,
    plan_compaction,
    request_tokens,
)

_text = st.text(alphabet="abcdefghij klmnop\n.()", min_size=0, max_size=400)
_big = st.integers(min_value=0, max_value=30_000).map(lambda n: "y" * n)

_op = st.one_of(
    st.tuples(st.just("user"), _text),
    st.tuples(st.just("answer"), _text),
    st.tuples(
        st.just("step"),
        st.lists(st.tuples(_text, _big), min_size=1, max_size=3),
        st.booleans(),  # all answered
        st.booleans(),  # with a file
    ),
    st.tuples(st.just("compact"), st.integers(0, 2)),
    st.tuples(st.just("checkout"), st.integers(0, 10_000)),
)


def _record(ops: list[tuple[Any, ...]]) -> Recorder:
    r = Recorder.start(open_app())
    for op in ops:
        kind = op[0]
        if kind == "user":
            r.user(op[1] or "?")
        elif kind == "answer":
            r.answer(op[1] or "ok")
        elif kind == "step":
            calls = [("bash", {"command": cmd}, out) for cmd, out in op[1]]
            files = {0: [("f.py", op[1][0][1].encode()[:2000] + b"\n", "edit")]} if op[3] else None
            r.step(calls, answered=None if op[2] else len(calls) - 1, files=files)
        elif kind == "compact":
            plan = plan_compaction(ContextState.from_events(r.events()), keep_turns=op[1])
            if plan is not None:
                r.compact(list(plan.covers), plan.summary)
        elif kind == "checkout" and r.nodes:
            r.checkout(r.nodes[op[1] % len(r.nodes)])
    if not r.nodes:
        r.user("hello")
    return r


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(_op, min_size=1, max_size=25),
    st.lists(st.integers(60, 30_000), min_size=1, max_size=4),
)
def test_budget_holds_pairs_stay_whole_and_incremental_equals_rebuilt(
    ops: list[tuple[Any, ...]], budgets: list[int]
) -> None:
    r = _record(ops)
    events = r.events()
    live = ContextState()
    builder = ContextBuilder(SETTINGS, blobs=r.app.blobs)
    # The live state is built at many heads on the way (exercising the cached view).
    for event in events:
        live.apply(event)
        if live.head is not None and event.originator_version % 3 == 0:
            try:
                builder.build(live, budget=budgets[0])
            except ContextBudgetError:
                pass
    for budget in budgets:
        fresh = ContextBuilder(SETTINGS, blobs=r.app.blobs)
        try:
            built = builder.build(live, budget=budget)
        except ContextBudgetError as e:
            assert e.needed > budget
            continue
        again = fresh.build(ContextState.from_events(events), budget=budget)
        assert built.tokens <= budget
        assert built.tokens == request_tokens(built.request)
        assert sum(p.tokens for p in built.parts) == built.tokens
        assert all(p.tokens >= 0 for p in built.parts)
        assert pairing_problems(built.request) == []
        assert built.canonical_json() == again.canonical_json()


def test_a_long_turn_extends_the_last_build_instead_of_walking_history() -> None:
    r = Recorder.start(open_app())
    r.user("refactor everything")
    live = ContextState()
    for event in r.events():
        live.apply(event)
    builder = ContextBuilder(SETTINGS, blobs=r.app.blobs)
    walks = 0
    walk = builder._walk

    def counting_walk(*args: Any, **kwargs: Any) -> Any:
        nonlocal walks
        walks += 1
        return walk(*args, **kwargs)

    builder._walk = counting_walk  # type: ignore[method-assign]
    seen = len(r.events())
    for step in range(150):
        r.step([("bash", {"command": f"echo {step}"}, f"out {step}")], answered=None)
        events = r.events()
        for event in events[seen:]:
            live.apply(event)
        seen = len(events)
        built = builder.build(live, budget=100_000)
        if step % 50 == 49:
            fresh = ContextBuilder(SETTINGS, blobs=r.app.blobs)
            again = fresh.build(ContextState.from_events(events), budget=100_000)
            assert built.canonical_json() == again.canonical_json()
            assert built.tokens == again.tokens and built.parts == again.parts
    # One walk to start; every later step only renders what is new.
    assert walks <= 2
