"""build_provider, canonical_request, ModelRequest checks, pricing and retry timing."""

from __future__ import annotations

import json
from decimal import Decimal
from email.utils import formatdate
from pathlib import Path

import httpx
import pytest
from provider_wire import request, run

from coder_es.errors import UsageError
from coder_es.providers import (
    AnthropicProvider,
    InvalidRequestError,
    ModelRequest,
    OllamaProvider,
    OpenAIProvider,
    Price,
    PriceTable,
    ProviderConfigError,
    RateLimitedError,
    RetryPolicy,
    ScriptedProvider,
    build_provider,
    canonical_request,
)
from coder_es.providers.retry import retry_after_seconds, should_retry


def test_missing_anthropic_key_says_what_to_set_and_how_to_go_offline() -> None:
    with pytest.raises(ProviderConfigError) as info:
        build_provider("anthropic", "claude-sonnet-4-5", env={})
    message = str(info.value)
    assert "ANTHROPIC_API_KEY" in message and "scripted" in message
    assert isinstance(info.value, UsageError)  # the CLI exits 2 on it


def test_openai_needs_a_key_only_for_the_official_endpoint() -> None:
    with pytest.raises(ProviderConfigError, match="OPENAI_API_KEY"):
        build_provider("openai", "gpt-4.1", env={})
    local = build_provider("openai", "llama", env={"OPENAI_BASE_URL": "http://localhost:8000/v1"})
    assert isinstance(local, OpenAIProvider) and local.max_tokens_field == "max_tokens"
    assert local.url == "http://localhost:8000/v1/chat/completions"
    official = build_provider("openai", "gpt-5", env={"OPENAI_API_KEY": "sk"})
    assert isinstance(official, OpenAIProvider)
    assert official.max_tokens_field == "max_completion_tokens"
    run(local.aclose())
    run(official.aclose())


def test_providers_from_env_use_the_given_client() -> None:
    client = httpx.AsyncClient()
    anthropic = build_provider(
        "Anthropic",
        "claude-haiku-4-5",
        client=client,
        env={"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": "https://proxy.example/v1"},
    )
    assert isinstance(anthropic, AnthropicProvider) and anthropic.client is client
    assert anthropic.url == "https://proxy.example/v1/messages"
    ollama = build_provider("ollama", "qwen3", client=client, env={"OLLAMA_HOST": "box:9999"})
    assert isinstance(ollama, OllamaProvider) and ollama.url == "http://box:9999/api/chat"
    run(client.aclose())


def test_bad_base_url_and_unknown_provider() -> None:
    with pytest.raises(ProviderConfigError, match="ANTHROPIC_BASE_URL"):
        build_provider(
            "anthropic", "m", env={"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": "nope"}
        )
    with pytest.raises(
        ProviderConfigError, match="anthropic, openai, openai-responses, ollama, scripted"
    ):
        build_provider("gemini", "m", env={})


def test_scripted_from_model_path_or_env(tmp_path: Path) -> None:
    script = tmp_path / "demo.json"
    script.write_text(json.dumps([{"blocks": [{"type": "text", "text": "hi"}]}]))
    by_path = build_provider("scripted", str(script), env={})
    assert isinstance(by_path, ScriptedProvider) and by_path.model == "demo"
    by_env = build_provider("scripted", "fake-model", env={"CODER_ES_SCRIPT": str(script)})
    assert run(by_env.complete(request())).text == "hi"
    with pytest.raises(ProviderConfigError, match="CODER_ES_SCRIPT"):
        build_provider("scripted", "fake-model", env={})


def test_canonical_request_ignores_form_but_not_substance() -> None:
    a = request(messages=[{"role": "user", "content": "Hi"}], metadata={"session": "1"})
    b = request(
        messages=[
            {
                "role": "user",
                "content": [{"type": "text", "text": "Hi", "cache_control": {"type": "ephemeral"}}],
            }
        ],
        metadata={"session": "2"},
    )
    assert canonical_request(a) == canonical_request(b)
    assert json.loads(json.dumps(canonical_request(a))) == canonical_request(a)
    assert canonical_request(a) != canonical_request(request(temperature=0.5))
    assert canonical_request(a) != canonical_request(
        request(tools=[{"name": "read", "description": "", "input_schema": {}}])
    )
    with pytest.raises(InvalidRequestError, match="JSON"):
        canonical_request(request(extra_body={"x": object()}))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"messages": [{"role": "system", "content": "x"}]}, "ModelRequest.system"),
        ({"messages": [{"role": "user", "content": [{"text": "x"}]}]}, "list of blocks"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"model": ""}, "model"),
    ],
)
def test_model_request_rejects_malformed_input(kwargs: dict[str, object], message: str) -> None:
    base: dict[str, object] = {"model": "m", "messages": []}
    base.update(kwargs)
    with pytest.raises(InvalidRequestError, match=message):
        ModelRequest(**base)  # type: ignore[arg-type]


def test_cost_uses_longest_prefix_and_overrides(tmp_path: Path) -> None:
    table = PriceTable.default()
    usage = {
        "input_tokens": 1_000_000,
        "output_tokens": 1_000_000,
        "cache_read_tokens": 1_000_000,
        "cache_write_tokens": 1_000_000,
    }
    assert table.cost("claude-sonnet-4-5-20250929", usage) == Decimal("3") + 15 + Decimal(
        "0.3"
    ) + Decimal("3.75")
    assert table.cost("claude-opus-4-5-20251101", usage) != table.cost("claude-opus-4-1", usage)
    assert table.cost("some-local-model", usage) is None
    custom = table.merged({"some-local": Price.of(0, 0)})
    assert custom.cost("some-local-model", usage) == 0
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"claude-sonnet-4": {"input": 1, "output": 2}}))
    assert PriceTable.from_file(path).cost("claude-sonnet-4-5", usage) == 1 + 2 + 1 + 1
    path.write_text(json.dumps({"x": {"input": 1}}))
    with pytest.raises(ProviderConfigError, match="'input' and 'output'"):
        PriceTable.from_file(path)


def test_retry_after_forms() -> None:
    assert retry_after_seconds({"retry-after-ms": "250"}) == 0.25
    assert retry_after_seconds({"retry-after": "7"}) == 7.0
    date = formatdate(1_000_030, usegmt=True)
    assert retry_after_seconds({"retry-after": date}, now=lambda: 1_000_000) == 30.0
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({}) is None
    err = RateLimitedError("slow down")
    assert should_retry({}, err) and not should_retry({"x-should-retry": "false"}, err)


def test_backoff_grows_is_capped_and_ignores_absurd_hints() -> None:
    policy = RetryPolicy(base_delay_s=0.5, max_delay_s=4, jitter=0.5, random=lambda: 1.0)
    assert [policy.backoff(n) for n in (1, 2, 3, 4, 5)] == [0.25, 0.5, 1.0, 2.0, 2.0]
    assert policy.delay(1, RateLimitedError("x", retry_after=3600)) == 0.25
    assert policy.delay(1, RateLimitedError("x", retry_after=12)) == 12
