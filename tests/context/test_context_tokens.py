"""The token estimate and text fitting: deterministic, monotone, never over the cap."""

from __future__ import annotations

from collections.abc import Callable

from context_helpers import SETTINGS
from hypothesis import given
from hypothesis import strategies as st

from coder_es.providers.types import ModelRequest
from projections.context import estimate_tokens, request_tokens, word_piece_tokens
from projections.context.tokens import MESSAGE_OVERHEAD, fit_text


def test_bytes_over_four_counts_utf8_bytes() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("abcd") == 1
    assert estimate_tokens("abcde") == 2
    # Four bytes of UTF-8 each: a non-Latin text costs more than its length in characters.
    assert estimate_tokens("日本語の") == 3


def test_word_pieces_count_symbols_and_split_long_words() -> None:
    assert word_piece_tokens("a.b(c)") == 6
    assert word_piece_tokens("internationalization") == 5
    assert word_piece_tokens("   ") == 0


@given(
    st.text(min_size=0, max_size=3000),
    st.integers(min_value=0, max_value=400),
    st.sampled_from([estimate_tokens, word_piece_tokens]),
)
def test_fit_text_never_exceeds_the_cap(text: str, cap: int, counter: Callable[[str], int]) -> None:
    out = fit_text(text, cap, counter, lambda k: f"[{k} cut]")
    assert counter(out) <= cap
    if counter(text) <= cap:
        assert out == text


def test_fit_text_keeps_head_and_tail_and_says_how_much_is_missing() -> None:
    text = "HEAD" + "x" * 10_000 + "TAIL"
    out = fit_text(text, 100, estimate_tokens, lambda k: f"[{k} characters cut]")
    assert out.startswith("HEAD") and out.endswith("TAIL")
    assert "characters cut]" in out and estimate_tokens(out) <= 100


def test_request_tokens_adds_system_tools_and_messages() -> None:
    request = ModelRequest(
        model="m",
        system="s" * 40,
        tools=SETTINGS.tools,
        messages=[{"role": "user", "content": "hello world!"}],
    )
    with_msg = request_tokens(request)
    empty = request_tokens(
        ModelRequest(model="m", system="s" * 40, tools=SETTINGS.tools, messages=[])
    )
    assert with_msg - empty == MESSAGE_OVERHEAD + 2 + 3
