"""Errors of the context projection."""

from __future__ import annotations

from coder_es.errors import CoderESError, UsageError


class ContextError(CoderESError):
    """The context for a model request cannot be built as asked."""


class ContextBudgetError(ContextError, UsageError):
    """The token budget cannot hold even the fixed parts and the newest message, shortened."""

    def __init__(self, budget: int, needed: int, what: str) -> None:
        self.budget = budget
        self.needed = needed
        super().__init__(
            f"a context budget of {budget} tokens is too small: {what} alone need {needed}"
        )


class ContextConfigError(ContextError, UsageError):
    """A context setting is out of range."""
