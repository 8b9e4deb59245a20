"""The model catalogue: bundled data, config overrides, unknown models, and where it is used."""

from __future__ import annotations

import asyncio
import json
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from coder_es.application import CoderApp
from coder_es.config import load_config
from coder_es.providers.catalogue import UNKNOWN, ModelCatalogue, notice
from coder_es.providers.errors import ProviderConfigError
from coder_es.providers.pricing import PriceTable
from coder_es.providers.scripted import ScriptedProvider
from coder_es.service.api import AgentService, SessionOptions
from coder_es.store.config import StoreConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "config"))
from config_helpers import ConfigHome

MILLION = {"input_tokens": 1_000_000, "output_tokens": 1_000_000}


def test_bundled_rows_give_window_output_prices_and_capabilities() -> None:
    models = ModelCatalogue.bundled()
    sonnet = models.info("claude-sonnet-4-5-20250929")  # a dated snapshot finds its row
    assert (sonnet.context_window, sonnet.max_output_tokens) == (200_000, 64_000)
    assert sonnet.price is not None and sonnet.price.cache_write == Decimal("3.75")
    assert {"vision", "reasoning", "prompt_caching"} <= sonnet.capabilities
    assert notice("claude-sonnet-4-5", sonnet) is None
    gpt5 = models.info("gpt-5")
    assert gpt5.context_window > 100_000 and "reasoning" in gpt5.capabilities
    # The budget leaves room for the answer.
    assert sonnet.context_budget(8192) == 200_000 - 8192


def test_bundled_file_names_its_source_and_licence() -> None:
    path = Path(__file__).resolve().parents[2] / "coder_es" / "data" / "models" / "catalogue.json"
    document = json.loads(path.read_text(encoding="utf-8"))
    assert "LiteLLM" in document["source"] and "MIT" in document["license"]


def test_unknown_model_gets_conservative_limits_and_a_one_line_notice() -> None:
    info = ModelCatalogue.bundled().info("my-finetune-7b")
    assert info is UNKNOWN and info.price is None
    line = notice("my-finetune-7b", info)
    assert line is not None and "\n" not in line
    assert "[models.my-finetune-7b]" in line and "32000" in line
    assert PriceTable.default().cost("my-finetune-7b", MILLION) is None  # never a guess


def test_catalogue_prices_reach_the_price_table() -> None:
    # A model the hand-written table never listed is priced from the catalogue.
    models = ModelCatalogue.bundled()
    name = next(n for n, i in models.models.items() if i.price and n.startswith("gpt-5.1"))
    price = models.info(name).price
    assert price is not None
    assert PriceTable.default().cost(name, MILLION) == price.input + price.output


def test_overrides_lay_over_the_bundled_row_or_add_one() -> None:
    models = ModelCatalogue.bundled().merged(
        {
            "claude-sonnet-4-5": {"context_window": 1_000_000},
        }
    )
    sonnet = models.info("claude-sonnet-4-5")
    assert sonnet.context_window == 1_000_000
    assert sonnet.price == ModelCatalogue.bundled().info("claude-sonnet-4-5").price  # kept
    with pytest.raises(ProviderConfigError, match="needs input and output"):
        ModelCatalogue.bundled().merged({"local-qwen": {"input": 0}})
    local = ModelCatalogue.bundled().merged(
        {"local-qwen": {"context_window": 32_768, "max_output_tokens": 8192, "capabilities": []}}
    )
    assert local.info("local-qwen").known and local.info("local-qwen").context_window == 32_768


def test_models_table_in_config(home: ConfigHome) -> None:
    home.write_user(
        '[models."local-qwen"]\ncontext_window = 65536\nmax_output_tokens = 4096\n'
        'input = 0.5\noutput = 1\ncapabilities = ["reasoning"]\n'
        "[models.claude-haiku-4-5]\noutput = 4\n"
    )
    config = load_config(home.workspace, home.environ)
    models = config.model_catalogue()
    assert models.info("local-qwen").context_window == 65_536
    assert models.info("local-qwen").capabilities == frozenset({"reasoning"})
    table = config.price_table()
    assert table.cost("local-qwen", MILLION) == Decimal("1.5")
    assert table.cost("claude-haiku-4-5", MILLION) == Decimal(1) + 4


def test_models_table_of_a_project_applies_once_trusted(home: ConfigHome) -> None:
    # An untrusted project config only tightens (coder_es.config.untrusted): what it says of
    # a model (the context sent, the costs shown) waits for `coder-es trust`.
    text = "[models.local-qwen]\ncontext_window = 16384\nmax_output_tokens = 2048\n"
    home.write_project(text)
    config = load_config(home.workspace, home.environ)
    assert {i.path for i in config.ignored} == {
        "models.local-qwen.context_window",
        "models.local-qwen.max_output_tokens",
    }
    home.write_project(text, trusted=True)
    config = load_config(home.workspace, home.environ)
    assert not config.ignored
    assert config.model_catalogue().info("local-qwen").context_window == 16_384


def test_bad_models_row_is_a_config_problem(home: ConfigHome) -> None:
    home.write_user("[models.x]\ncontext_window = -5\n")
    with pytest.raises(Exception, match="context_window"):
        load_config(home.workspace, home.environ)


@pytest.fixture
def home(tmp_path: Path) -> ConfigHome:
    workspace = tmp_path / "project"
    workspace.mkdir()
    environ = {"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "HOME": str(tmp_path / "home")}
    return ConfigHome(workspace=workspace, xdg=tmp_path / "xdg", environ=environ)


def test_session_budget_comes_from_the_catalogue_and_is_recorded(tmp_path: Path) -> None:
    app = CoderApp(StoreConfig(backend="sqlite", path=tmp_path / "store"))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    models = ModelCatalogue.bundled().merged(
        {"tiny": {"context_window": 50_000, "max_output_tokens": 4096}}
    )

    def service(model: str) -> AgentService:
        return AgentService(
            app,
            workspace,
            provider_factory=lambda _n, _m: ScriptedProvider([], model=model),
            models=models,
        )

    handle = asyncio.run(service("tiny").create_session(SessionOptions()))
    session_id = str(handle.loop.session.id)
    assert handle.loop.config.context_budget == 50_000 - 4096
    assert app.get_session(session_id).settings["context_budget"] == 50_000 - 4096
    # Reopened with the same model: the recorded budget, even if the catalogue changed since.
    later = AgentService(
        app,
        workspace,
        provider_factory=lambda _n, _m: ScriptedProvider([], model="tiny"),
    )
    assert asyncio.run(later.open_session(session_id)).loop.config.context_budget == 45_904
    # Reopened with another model: that model's window.
    other = asyncio.run(service("claude-sonnet-4-5").open_session(session_id))
    assert other.loop.config.context_budget == 200_000 - 8192
