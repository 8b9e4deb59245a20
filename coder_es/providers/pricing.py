"""Token prices per model and the cost of a response's usage.

Prices are US dollars per million tokens, as published by the providers when this table was
written; they change, so users override them (``PriceTable.default().merged({...})`` or a JSON
file via ``PriceTable.from_file``). Models are matched by the longest key that prefixes the model
name, so ``claude-sonnet-4-5-20250929`` uses the ``claude-sonnet-4-5`` row.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from coder_es.providers.errors import ProviderConfigError
from coder_es.providers.price import Price
from coder_es.providers.types import Usage

_MILLION = Decimal(1_000_000)


def _anthropic(input: float, output: float) -> Price:
    # Cache reads cost 0.1x the input price, 5-minute cache writes 1.25x.
    return Price.of(input, output, round(input * 0.1, 4), round(input * 1.25, 4))


DEFAULT_PRICES: dict[str, Price] = {
    "claude-opus-4-5": _anthropic(5, 25),
    "claude-opus-4-1": _anthropic(15, 75),
    "claude-opus-4": _anthropic(15, 75),
    "claude-sonnet-4": _anthropic(3, 15),
    "claude-3-7-sonnet": _anthropic(3, 15),
    "claude-haiku-4-5": _anthropic(1, 5),
    "claude-3-5-haiku": _anthropic(0.8, 4),
    "gpt-5-mini": Price.of(0.25, 2, 0.025),
    "gpt-5-nano": Price.of(0.05, 0.4, 0.005),
    "gpt-5": Price.of(1.25, 10, 0.125),
    "gpt-4.1-mini": Price.of(0.4, 1.6, 0.1),
    "gpt-4.1-nano": Price.of(0.1, 0.4, 0.025),
    "gpt-4.1": Price.of(2, 8, 0.5),
    "gpt-4o-mini": Price.of(0.15, 0.6, 0.075),
    "gpt-4o": Price.of(2.5, 10, 1.25),
    "o4-mini": Price.of(1.1, 4.4, 0.275),
    "o3": Price.of(2, 8, 0.5),
    "scripted": Price.of(0, 0),
}


@dataclass(frozen=True)
class PriceTable:
    prices: Mapping[str, Price]
    overrides: Mapping[str, Price] = field(default_factory=dict)
    """The user's rows: looked up before ``prices``, so a prefix the user priced wins over a
    longer name of the bundled tables."""

    @classmethod
    def default(cls) -> PriceTable:
        """The table above with the model catalogue's prices (newer) on top."""
        from coder_es.providers.catalogue import ModelCatalogue

        return cls({**DEFAULT_PRICES, **ModelCatalogue.bundled().prices()})

    @classmethod
    def from_file(cls, path: str | Path, base: PriceTable | None = None) -> PriceTable:
        """Overrides from JSON: ``{"model-prefix": {"input": 3, "output": 15, "cache_read": 0.3,
        "cache_write": 3.75}}`` (cache prices default to the input price)."""
        p = Path(path)
        try:
            raw = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ProviderConfigError(f"cannot read price table {p}: {e}") from e
        if not isinstance(raw, dict):
            raise ProviderConfigError(f"price table {p} must be a JSON object of models")
        overrides: dict[str, Price] = {}
        for model, row in raw.items():
            overrides[model] = _price_row(row, f"{p}: {model}")
        return (base or cls.default()).merged(overrides)

    def merged(self, overrides: Mapping[str, Price]) -> PriceTable:
        return PriceTable(self.prices, {**self.overrides, **overrides})

    def price(self, model: str) -> Price | None:
        return _match(self.overrides, model) or _match(self.prices, model)

    def cost(self, model: str, usage: Usage) -> Decimal | None:
        """Dollars for ``usage``, or None for a model with no known price (never a guess)."""
        price = self.price(model)
        return None if price is None else cost_at(price, usage)


def cost_at(price: Price, usage: Usage) -> Decimal:
    """Dollars for ``usage`` at ``price``."""
    total = (
        price.input * usage.get("input_tokens", 0)
        + price.output * usage.get("output_tokens", 0)
        + price.cache_read * usage.get("cache_read_tokens", 0)
        + price.cache_write * usage.get("cache_write_tokens", 0)
    )
    return total / _MILLION


def _match(prices: Mapping[str, Price], model: str) -> Price | None:
    if model in prices:
        return prices[model]
    best = max((k for k in prices if model.startswith(k)), key=len, default=None)
    return prices[best] if best is not None else None


def _price_row(row: Any, where: str) -> Price:
    if not isinstance(row, dict) or "input" not in row or "output" not in row:
        raise ProviderConfigError(f"{where}: needs at least 'input' and 'output' prices")
    try:
        return Price.of(row["input"], row["output"], row.get("cache_read"), row.get("cache_write"))
    except (ArithmeticError, ValueError) as e:
        raise ProviderConfigError(f"{where}: prices must be numbers ({e})") from e
