"""The bounded context for the next model request: a pure, incremental projection of the events.

    state = ContextState.from_events(events)          # or state.apply(event) as they come
    built = ContextBuilder(settings, blobs=app.blobs, related=graph_related(graph)).build(
        state, budget=100_000)                        # head defaults to the session's head
    built.request                                     # a ModelRequest within the budget
    built.parts                                       # tokens per part: system, instructions,
                                                      # tools, summaries, messages, files, related
    plan = plan_compaction(state)                     # covers + fallback summary, or None

A session forked from another starts from that session's conversation up to the fork:
``session_context(events, session_events)`` folds a session's events onto it
(``forked_from(started_event, session_events)`` is the state before the first event).

Modules: ``tokens`` (the pluggable estimate), ``state`` (incremental path view and units),
``render`` (units as messages at a level of detail), ``summarize`` (deterministic fallback
summarizer), ``builder`` (budgeting and layout), ``compaction`` (what a summary covers).
"""

from projections.context.builder import (
    HEAD,
    PART_NAMES,
    BuiltContext,
    ContextBuilder,
    ContextConfig,
    ContextPart,
    ContextSettings,
    FileInContext,
    RelatedCode,
    graph_related,
    stable_prefix,
)
from projections.context.compaction import CompactionPlan, compaction_transcript, plan_compaction
from projections.context.errors import ContextBudgetError, ContextConfigError, ContextError
from projections.context.state import ContextState, forked_from, session_context
from projections.context.summarize import fallback_summary
from projections.context.tokens import (
    TokenCounter,
    estimate_tokens,
    request_tokens,
    word_piece_tokens,
)

__all__ = [
    "HEAD",
    "PART_NAMES",
    "BuiltContext",
    "CompactionPlan",
    "ContextBudgetError",
    "ContextBuilder",
    "ContextConfig",
    "ContextConfigError",
    "ContextError",
    "ContextPart",
    "ContextSettings",
    "ContextState",
    "FileInContext",
    "RelatedCode",
    "TokenCounter",
    "compaction_transcript",
    "estimate_tokens",
    "fallback_summary",
    "forked_from",
    "graph_related",
    "plan_compaction",
    "request_tokens",
    "session_context",
    "stable_prefix",
    "word_piece_tokens",
]
