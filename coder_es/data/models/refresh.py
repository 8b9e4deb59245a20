"""Refresh ``catalogue.json`` from LiteLLM's model table (MIT licence, (c) 2023 Berri AI).

LiteLLM publishes ``model_prices_and_context_window.json`` in its repository and ships it in every
``litellm`` wheel on PyPI as ``litellm/model_prices_and_context_window_backup.json``. Get one with
``pip download --no-deps litellm`` and ``unzip`` the file, then:

    python coder_es/data/models/refresh.py path/to/model_prices_and_context_window_backup.json

Only the chat models of the providers coder-es speaks to are kept, with the fields it uses.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

PROVIDERS = {"anthropic": "anthropic", "openai": "openai"}
MODES = ("chat", "responses")
OUT = Path(__file__).with_name("catalogue.json")


def per_million(value: Any) -> float | None:
    return round(value * 1_000_000, 6) if isinstance(value, int | float) else None


def entry(row: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"provider": PROVIDERS[row["litellm_provider"]]}
    if isinstance(row.get("max_input_tokens"), int):
        out["context_window"] = row["max_input_tokens"]
    if isinstance(row.get("max_output_tokens"), int):
        out["max_output_tokens"] = row["max_output_tokens"]
    for key, src in (
        ("input", "input_cost_per_token"),
        ("output", "output_cost_per_token"),
        ("cache_read", "cache_read_input_token_cost"),
        ("cache_write", "cache_creation_input_token_cost"),
    ):
        price = per_million(row.get(src))
        if price is not None:
            out[key] = price
    out["capabilities"] = sorted(
        k.removeprefix("supports_")
        for k, v in row.items()
        if k.startswith("supports_") and v is True
    )
    return out


def main(source: str) -> None:
    table = json.loads(Path(source).read_text(encoding="utf-8"))
    models = {
        name: entry(row)
        for name, row in sorted(table.items())
        if isinstance(row, dict)
        and row.get("litellm_provider") in PROVIDERS
        and row.get("mode") in MODES
        and "/" not in name
    }
    document = {
        "source": "LiteLLM model_prices_and_context_window.json (https://github.com/BerriAI/litellm)",
        "license": "MIT License, Copyright (c) 2023 Berri AI",
        "units": "context_window, max_output_tokens: tokens; prices: US dollars per million tokens",
        "models": models,
    }
    OUT.write_text(json.dumps(document, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    print(f"{len(models)} models written to {OUT}")


if __name__ == "__main__":
    main(sys.argv[1])
