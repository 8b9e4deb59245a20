"""Our OTLP protobuf encoding of a span batch parses to exactly the message the SDK's encoder
builds for the same spans, whatever the spans hold; spans it does not cover go to the SDK's."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.span import TraceState

from coder_es.telemetry.otlp_protobuf import OtlpSpanEncoder

RESOURCE = Resource({"service.name": "coder-es", "deployment.environment": "test"})
SCOPE = InstrumentationScope("coder_es.telemetry", "1.2.3")
SAMPLED = TraceFlags(TraceFlags.SAMPLED)

text = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
# Around the length past which the encoder stops keeping a value's bytes.
long_text = st.text(st.characters(exclude_categories=("Cs",)), min_size=250, max_size=300)
int64 = st.integers(-(2**63), 2**63 - 1)
floats = st.floats(allow_nan=False)
scalar = st.one_of(text, long_text, st.booleans(), int64, floats)
value = st.one_of(
    scalar,
    st.lists(text, max_size=3),
    st.lists(long_text, max_size=2),
    st.lists(st.booleans(), max_size=3),
    st.lists(int64, max_size=3),
    st.lists(floats, max_size=3),
)
# Few keys and values, so that the encoder's kept bytes are hit, across spans and events.
key = st.sampled_from(["gen_ai.operation.name", "gen_ai.tool.name", "n", "flag", "", "clé"])
attributes = st.dictionaries(key, value, max_size=5)
ids = st.integers(1, 2**64 - 1)
times = st.integers(0, 2**64 - 1)


@st.composite
def spans(draw: Any) -> ReadableSpan:
    trace = draw(st.integers(1, 2**128 - 1))
    parent = draw(
        st.none() | st.builds(lambda s, r: SpanContext(trace, s, r, SAMPLED), ids, st.booleans())
    )
    code = draw(st.sampled_from(list(StatusCode)))
    description = draw(st.none() | text) if code is StatusCode.ERROR else None
    return ReadableSpan(
        name=draw(text),
        context=SpanContext(trace, draw(ids), False, SAMPLED),
        parent=parent,
        resource=RESOURCE,
        attributes=draw(attributes),
        events=draw(st.lists(st.builds(Event, text, attributes, times), max_size=3)),
        kind=draw(st.sampled_from(list(SpanKind))),
        status=Status(code, description),
        start_time=draw(st.none() | times),
        end_time=draw(st.none() | times),
        instrumentation_scope=SCOPE,
    )


def same_as_sdk(batch: list[ReadableSpan], encoder: OtlpSpanEncoder | None = None) -> None:
    ours = (encoder or OtlpSpanEncoder()).encode_request(batch)
    assert ours is not None
    assert ExportTraceServiceRequest.FromString(ours) == encode_spans(batch)


@settings(max_examples=300, deadline=None)
@given(st.lists(spans(), min_size=1, max_size=6))
def test_any_batch_encodes_as_the_sdk_does(batch: list[ReadableSpan]) -> None:
    same_as_sdk(batch)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(spans(), min_size=1, max_size=4), min_size=2, max_size=4))
def test_kept_bytes_do_not_leak_between_batches(batches: list[list[ReadableSpan]]) -> None:
    # One encoder for every batch, as the exporter keeps one: its cache must never put one
    # span's attribute (or a span attribute's field tag) into another place.
    encoder = OtlpSpanEncoder()
    for batch in batches:
        same_as_sdk(batch, encoder)


def span(**changes: Any) -> ReadableSpan:
    fields: dict[str, Any] = {
        "name": "chat m",
        "context": SpanContext(7, 9, False, SAMPLED),
        "parent": None,
        "resource": RESOURCE,
        "attributes": {"a": 1},
        "instrumentation_scope": SCOPE,
        "start_time": 1,
        "end_time": 2,
    }
    fields.update(changes)
    return ReadableSpan(**fields)


def test_values_that_collide_in_a_dict_keep_their_types() -> None:
    # True == 1 == 1.0 and -0.0 == 0.0: a cache keyed by value alone would send the wrong one.
    batch = [
        span(attributes={"v": 1}),
        span(attributes={"v": True}),
        span(attributes={"v": 1.0}),
        span(attributes={"v": 0.0}),
        span(attributes={"v": -0.0}),
    ]
    encoder = OtlpSpanEncoder()
    same_as_sdk(batch, encoder)
    parsed = ExportTraceServiceRequest.FromString(encoder.encode_request(batch) or b"")
    values = [s.attributes[0].value for s in parsed.resource_spans[0].scope_spans[0].spans]
    assert [v.WhichOneof("value") for v in values] == [
        "int_value",
        "bool_value",
        "double_value",
        "double_value",
        "double_value",
    ]
    assert math.copysign(1, values[4].double_value) == -1


def test_long_text_is_encoded_but_not_kept() -> None:
    # Captured messages are long and never repeat: keeping their bytes would only fill memory.
    message = "x" * 100_000
    encoder = OtlpSpanEncoder()
    batch = [span(attributes={"gen_ai.output.messages": message, "n": [1, 2], "ok": True})]
    same_as_sdk(batch, encoder)
    kept = [key[3] for key in encoder._attributes]
    assert True in kept and message not in kept


def test_what_it_does_not_cover_is_left_to_the_sdk() -> None:
    other = Resource({"service.name": "other"})
    for batch in (
        [],
        [span(links=[Link(SpanContext(7, 10, False, SAMPLED))])],
        [span(context=SpanContext(7, 9, False, SAMPLED, TraceState([("k", "v")])))],
        [span(), span(resource=other)],
        [span(attributes={"big": 2**63})],
        [span(name="\ud800")],
    ):
        assert OtlpSpanEncoder().encode_request(batch) is None, batch
