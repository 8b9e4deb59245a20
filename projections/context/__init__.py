"""The bounded context for the next model request: a pure, incremental projection of the events.

    state = ContextState.from_events(events)          # or state.apply(event) as they come
    built = ContextBuilder(settings, blobs=app.blobs, related=graph_related(graph)).build(
        state, budget=100_000)                        # head defaults to the session's head
    built.request                                     # a ModelRequest within the budget
    built.parts                                       # tokens per part: system, instructions,
                                                      # tools, summaries, messages, files, related
    plan = plan_compaction(state)                     # covers + fallback summary, or None

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
from projections.context.state import ContextState
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
    "graph_related",
    "plan_compaction",
    "request_tokens",
    "stable_prefix",
    "word_piece_tokens",
]
