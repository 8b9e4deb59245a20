"""The SSE and NDJSON decoders on awkwardly split input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from provider_wire import crlf, split_at, wire

from coder_es.providers.errors import StreamProtocolError
from coder_es.providers.sse import NDJSONDecoder, SSEDecoder, SSEFrame


def decode(chunks: list[bytes]) -> list[SSEFrame]:
    decoder = SSEDecoder()
    frames: list[SSEFrame] = []
    for chunk in chunks:
        frames.extend(decoder.feed(chunk))
    frames.extend(decoder.close())
    return frames


SAMPLE = wire("anthropic/tool_use.sse")
EXPECTED = decode([SAMPLE])


def test_whole_sample_decodes_to_its_events() -> None:
    assert [f.event for f in EXPECTED[:3]] == ["message_start", "content_block_start", "ping"]
    assert EXPECTED[-1] == SSEFrame("message_stop", b'{"type":"message_stop"}')
    assert len(EXPECTED) == SAMPLE.count(b"\n\n")


@pytest.mark.parametrize("size", [1, 2, 3, 5, 64])
def test_any_fixed_chunk_size_gives_the_same_frames(size: int) -> None:
    chunks = [SAMPLE[i : i + size] for i in range(0, len(SAMPLE), size)]
    assert decode(chunks) == EXPECTED


def test_crlf_split_between_cr_and_lf_is_one_line_ending() -> None:
    data = crlf(SAMPLE)
    cuts = [i + 1 for i in range(len(data)) if data[i : i + 1] == b"\r"]
    assert decode(split_at(data, cuts)) == EXPECTED


def test_lone_cr_line_endings() -> None:
    assert decode([SAMPLE.replace(b"\n", b"\r")]) == EXPECTED


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=len(SAMPLE) * 2), max_size=40), st.booleans())
def test_random_splits_and_line_endings(cuts: list[int], use_crlf: bool) -> None:
    data = crlf(SAMPLE) if use_crlf else SAMPLE
    assert decode(split_at(data, cuts)) == EXPECTED


def test_multiline_data_comments_ids_and_unknown_fields() -> None:
    data = (
        b": keep-alive comment\n"
        b"event: custom\n"
        b"id: 7\n"
        b"retry: 3000\n"
        b"foo: ignored\n"
        b"data: first line\n"
        b"data:second line\n"
        b"data\n"
        b"\n"
    )
    assert decode([data]) == [SSEFrame("custom", b"first line\nsecond line\n", "7")]


def test_event_without_data_is_not_dispatched_and_default_type_is_message() -> None:
    assert decode([b"event: ping\n\ndata: x\n\n"]) == [SSEFrame("message", b"x")]


def test_bom_at_stream_start_is_skipped() -> None:
    assert decode([b"\xef\xbb", b"\xbfdata: 1\n\n"]) == [SSEFrame("message", b"1")]


def test_final_frame_without_blank_line_is_still_delivered() -> None:
    assert decode([b"data: [DONE]\n"]) == [SSEFrame("message", b"[DONE]")]


def test_stream_cut_inside_a_line_is_an_error() -> None:
    decoder = SSEDecoder()
    decoder.feed(b'data: {"type":"content_block_delta","ind')
    with pytest.raises(StreamProtocolError, match="middle of a line"):
        decoder.close()


def test_ndjson_lines_split_anywhere() -> None:
    data = wire("ollama/text.ndjson")
    expected = [line for line in data.split(b"\n") if line]
    for size in (1, 4, 33):
        decoder = NDJSONDecoder()
        lines: list[bytes] = []
        for i in range(0, len(data), size):
            lines.extend(decoder.feed(data[i : i + size]))
        lines.extend(decoder.close())
        assert lines == expected
    decoder = NDJSONDecoder()
    assert decoder.feed(crlf(data)) == expected
