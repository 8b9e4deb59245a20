"""Token usage and cost of a session, with those of the subagents it started rolled up.

``usage_of(app, session, prices)`` sums ``ModelResponded.usage`` of the session (``own``) and,
through its ``TaskStarted`` events, of its children and their children (``subagents``); ``total``
is both. Kept apart so a view can show what the subagents cost next to what the session did.

Cost is in US dollars, each response priced by its own model (a child may run another model)
with ``prices`` (``Config.price_table()``: the bundled table, the model catalogue and the
user's rows). A response of a model with no known price makes the sum it is in unknown
(``None``), never a guess; ``unpriced`` names those models.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from uuid import UUID

from coder_es.domain.session import Session
from coder_es.providers.price import Price
from coder_es.providers.pricing import PriceTable, cost_at
from coder_es.providers.types import usage_from


def _add(a: Decimal | None, b: Decimal | None) -> Decimal | None:
    return None if a is None or b is None else a + b


@dataclass(frozen=True)
class SessionUsage:
    own: dict[str, int]
    subagents: dict[str, int]
    own_cost: Decimal | None = Decimal(0)
    """Dollars of the session's own responses; None if one was of a model with no price."""
    subagents_cost: Decimal | None = Decimal(0)
    unpriced: tuple[str, ...] = ()
    """Models (of the session or its subagents) with no known price."""

    @property
    def total(self) -> dict[str, int]:
        return dict(Counter(self.own) + Counter(self.subagents))

    @property
    def total_cost(self) -> Decimal | None:
        return _add(self.own_cost, self.subagents_cost)


def usage_of(
    app: Any,
    session: UUID,
    prices: PriceTable | None = None,
    *,
    after: int = 0,
    events: Sequence[Any] | None = None,
) -> SessionUsage:
    """``after``: only what the session recorded after that version (one turn's, for ``run``);
    a subagent started then counts whole. ``events``: the session's events when the caller
    has read them already (``show``: the log is read once)."""
    table = prices if prices is not None else PriceTable.default()
    # A price is looked up once per model (a lookup scans the table for the longest prefix).
    price_of: dict[str, Price | None] = {}
    own: Counter[str] = Counter()
    subagents: Counter[str] = Counter()
    own_cost: Decimal | None = Decimal(0)
    subagents_cost: Decimal | None = Decimal(0)
    unpriced: set[str] = set()
    for event in app.session_events(session) if events is None else events:
        if event.originator_version <= after:
            continue
        if isinstance(event, Session.ModelResponded):
            own.update({k: int(v) for k, v in event.usage.items() if isinstance(v, int)})
            if event.model not in price_of:
                price_of[event.model] = table.price(event.model)
            price = price_of[event.model]
            cost = None if price is None else cost_at(price, usage_from(event.usage))
            if cost is None:
                unpriced.add(event.model)
            own_cost = _add(own_cost, cost)
        elif isinstance(event, Session.TaskStarted):
            child = usage_of(app, UUID(event.child_session), table)
            subagents.update(child.total)
            subagents_cost = _add(subagents_cost, child.total_cost)
            unpriced.update(child.unpriced)
    return SessionUsage(
        dict(own), dict(subagents), own_cost, subagents_cost, tuple(sorted(unpriced))
    )


def usage_summary(usage: SessionUsage) -> str:
    """``in=N out=N $X``, then the subagents' share when there is one (``run``'s last line)."""
    tokens = usage.total
    line = (
        f"in={tokens.get('input_tokens', 0)} out={tokens.get('output_tokens', 0)} "
        f"{dollars(usage.total_cost)}"
    )
    if usage.subagents:
        line += f" (subagents {dollars(usage.subagents_cost)})"
    if usage.unpriced:
        line += f" (no price for {', '.join(usage.unpriced)})"
    return line


def dollars(cost: Decimal | None) -> str:
    """A cost as a person reads it: ``$0.0123``, or ``unknown`` (never a guess)."""
    if cost is None:
        return "unknown"
    if cost == 0:
        return "$0"
    if cost < Decimal("0.01"):
        return f"${cost:.6f}"
    return f"${cost:.4f}" if cost < 1 else f"${cost:.2f}"
