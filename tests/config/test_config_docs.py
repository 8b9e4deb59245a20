"""The reference in docs/configuration.md stays true to the schema."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from config_helpers import ConfigHome

from coder_es.config import ENV_SETTINGS, load_config
from coder_es.config.catalog import CHECKED_PROVIDERS, is_known_model, known_models
from coder_es.config.schema import leaf_paths

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
TEXT = DOC.read_text(encoding="utf-8")


def test_every_key_is_documented() -> None:
    undocumented = []
    for path in leaf_paths():
        if path[0] == "providers" and len(path) > 1:
            path = path[2:]  # documented once, under [providers.<name>]
        key = re.escape(path[-1]) if path else ""
        # A key is documented in backquotes; a table, by its [header].
        if path and not re.search(rf"`{key}`|`\[(?:[\w.<>]+\.)?{key}(?:\.[\w.<>]+)?\]`", TEXT):
            undocumented.append(".".join(path))
    assert undocumented == []


def test_every_environment_variable_is_documented() -> None:
    missing = [name for name, _ in ENV_SETTINGS if f"`{name}`" not in TEXT]
    assert missing == []


@pytest.mark.parametrize(
    "block", re.findall(r"```toml\n(.*?)```", TEXT, re.S), ids=lambda b: b.split("\n")[0]
)
def test_the_examples_are_valid(home: ConfigHome, block: str) -> None:
    home.write_user(block)
    load_config(home.workspace, home.environ)


def test_every_priced_model_prefix_names_a_known_model() -> None:
    # The providers' price table and our list of names must not drift apart: a priced model that
    # validation rejects could never be used.
    pricing = pytest.importorskip("coder_es.providers.pricing")
    known = [m for p in CHECKED_PROVIDERS for m in known_models(p)]
    orphans = [
        prefix
        for prefix in pricing.DEFAULT_PRICES
        if prefix != "scripted" and not any(m.startswith(prefix) for m in known)
    ]
    assert orphans == [], "add these models to coder_es/config/catalog.py"
    assert all(is_known_model(m, known) for m in known)
