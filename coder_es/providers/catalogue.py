"""What is known about each model: context window, output limit, prices, capabilities.

The bundled table (``coder_es/data/models/catalogue.json``) is a filtered snapshot of LiteLLM's
maintained ``model_prices_and_context_window.json`` (MIT licence), refreshed without a code change
by ``coder_es/data/models/refresh.py``. The user's ``[models.NAME]`` config tables override or
add rows. A model found nowhere still works with ``UNKNOWN`` (conservative limits, no price) and
``notice`` says so in one line.

Lookup: the exact name, then the name without a date or ``-latest`` suffix
(``claude-sonnet-4-5-20250929`` -> ``claude-sonnet-4-5``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from typing import Any

from coder_es.providers.errors import ProviderConfigError
from coder_es.providers.price import Price

_SNAPSHOT = re.compile(r"-(?:\d{8}|\d{4}-\d{2}-\d{2}|latest)$")


@dataclass(frozen=True)
class ModelInfo:
    context_window: int
    max_output_tokens: int
    price: Price | None = None
    capabilities: frozenset[str] = field(default_factory=frozenset)
    known: bool = True

    def context_budget(self, max_tokens: int) -> int:
        """Input tokens a request may hold when ``max_tokens`` are reserved for the answer."""
        return max(self.context_window - min(max_tokens, self.max_output_tokens), 1024)


# Small enough for any model served today, so a budget built on it never overflows the window.
UNKNOWN = ModelInfo(context_window=32_000, max_output_tokens=4_096, known=False)


def notice(model: str, info: ModelInfo) -> str | None:
    """The one line to show when ``model`` is not in the catalogue (None when it is)."""
    if info.known:
        return None
    return (
        f"model {model!r} is not in the model catalogue: assuming a {UNKNOWN.context_window}-token "
        f"context window, {UNKNOWN.max_output_tokens} output tokens and no price "
        f"(set [models.{_toml_key(model)}] in the config to say otherwise)"
    )


def _toml_key(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else json.dumps(name)


@dataclass(frozen=True)
class ModelCatalogue:
    models: Mapping[str, ModelInfo]

    @classmethod
    def bundled(cls) -> ModelCatalogue:
        return _bundled()

    def merged(self, overrides: Mapping[str, Mapping[str, Any]]) -> ModelCatalogue:
        """Rows from config tables: any of ``context_window``, ``max_output_tokens``, ``input``,
        ``output``, ``cache_read``, ``cache_write`` (dollars per million) and ``capabilities``,
        laid over the row the model already has (or over ``UNKNOWN``)."""
        models = dict(self.models)
        for name, row in overrides.items():
            base = self.lookup(name) or UNKNOWN
            models[name] = _row(row, name, base)
        return ModelCatalogue(models)

    def lookup(self, model: str) -> ModelInfo | None:
        info = self.models.get(model)
        if info is None:
            info = self.models.get(_SNAPSHOT.sub("", model))
        return info

    def info(self, model: str) -> ModelInfo:
        return self.lookup(model) or UNKNOWN

    def prices(self) -> dict[str, Price]:
        return {name: info.price for name, info in self.models.items() if info.price is not None}


def _int(row: Mapping[str, Any], key: str, where: str, default: int) -> int:
    value = row.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ProviderConfigError(f"{where}: {key} must be a positive whole number of tokens")
    return value


def _row(row: Mapping[str, Any], where: str, base: ModelInfo) -> ModelInfo:
    price = base.price
    keys = ("input", "output", "cache_read", "cache_write")
    if any(k in row for k in keys):
        old = price or Price.of(0, 0)
        given = {k: row[k] for k in keys if k in row}
        if price is None and ("input" not in given or "output" not in given):
            raise ProviderConfigError(
                f"{where}: a model without a known price needs input and output"
            )
        try:
            price = Price.of(
                given.get("input", old.input),
                given.get("output", old.output),
                given.get("cache_read", old.cache_read if price else None),
                given.get("cache_write", old.cache_write if price else None),
            )
        except (ArithmeticError, ValueError) as e:
            raise ProviderConfigError(f"{where}: prices must be numbers ({e})") from e
    capabilities = row.get("capabilities", base.capabilities)
    if not all(isinstance(c, str) for c in capabilities):
        raise ProviderConfigError(f"{where}: capabilities must be a list of names")
    return replace(
        base,
        context_window=_int(row, "context_window", where, base.context_window),
        max_output_tokens=_int(row, "max_output_tokens", where, base.max_output_tokens),
        price=price,
        capabilities=frozenset(capabilities),
        known=True,
    )


@cache
def _bundled() -> ModelCatalogue:
    # Read once per process: it is package data, never changed while running.
    text = resources.files("coder_es.data").joinpath("models/catalogue.json").read_text("utf-8")
    document = json.loads(text)
    models: dict[str, ModelInfo] = {}
    for name, row in document["models"].items():
        if "context_window" not in row or "max_output_tokens" not in row:
            continue
        price = None
        if "input" in row and "output" in row:
            price = Price.of(
                row["input"], row["output"], row.get("cache_read"), row.get("cache_write")
            )
        models[name] = ModelInfo(
            context_window=row["context_window"],
            max_output_tokens=row["max_output_tokens"],
            price=price,
            capabilities=frozenset(row.get("capabilities", ())),
        )
    return ModelCatalogue(models)
