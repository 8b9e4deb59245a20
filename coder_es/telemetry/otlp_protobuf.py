"""A batch of finished spans as the bytes of an OTLP ``ExportTraceServiceRequest``, fast.

The SDK's encoder (``opentelemetry.exporter.otlp.proto.common.trace_encoder.encode_spans``) builds
one protobuf object per span, event, attribute and value through Python calls: 70-130 us per span
of ours, more than the whole save observer, and the largest part of what live export costs a turn.
This writes the same message straight to the wire format, and keeps the bytes of the attributes
that repeat from span to span (operation, model, tool, session, permission decision...): most of a
span is copied, not encoded.

It covers what our spans carry: one resource and one instrumentation scope per batch, attribute
values that are text, booleans, numbers or sequences of those, no links, no trace state. For
anything else ``encode_request`` returns None and the caller uses the SDK's encoder. The result
must parse to the message ``encode_spans`` builds for the same spans, field for field
(``tests/telemetry/test_otlp_protobuf.py`` checks that for arbitrary spans).

Wire format: https://protobuf.dev/programming-guides/encoding/ ; the messages:
opentelemetry-proto ``trace/v1/trace.proto``, ``common/v1/common.proto``,
``resource/v1/resource.proto``.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

# Attribute (key, value) pairs whose bytes are kept; past this many, the cache starts again (a
# session's repeating pairs are few; ids that never repeat must not grow it without bound).
CACHE_LIMIT = 4096
KEPT_TEXT = 256  # characters: the longest text whose bytes are kept

_pack_double = struct.Struct("<d").pack
_pack_fixed64 = struct.Struct("<Q").pack
_pack_fixed32 = struct.Struct("<I").pack
# Span.flags: SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK, and IS_REMOTE when the parent is remote.
_FLAGS_LOCAL = b"\x85\x01" + _pack_fixed32(0x100)
_FLAGS_REMOTE = b"\x85\x01" + _pack_fixed32(0x300)
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_STATUS_UNSET = b"\x7a\x00"  # an empty Status: the SDK always writes one


class _Unsupported(Exception):
    """A span this encoder does not cover: the SDK's encoder takes the batch."""


def _varint(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# SpanKind as the proto numbers it (from 1: 0 is UNSPECIFIED), with the field's tag.
_KINDS = {kind: b"\x30" + _varint(kind.value + 1) for kind in SpanKind}


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: its tag, the payload's length, the payload."""
    return tag + _varint(len(payload)) + payload


def _text(tag: bytes, value: str) -> bytes:
    return _field(tag, value.encode("utf-8")) if value else b""


def _any_value(value: Any) -> bytes:
    """An ``AnyValue``'s fields. Its value is a oneof: written even when it is 0, "" or false."""
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, str):
        return _field(b"\x0a", value.encode("utf-8"))
    if isinstance(value, int):
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise _Unsupported
        return b"\x18" + _varint(value & 0xFFFFFFFFFFFFFFFF)  # int64: two's complement
    if isinstance(value, float):
        return b"\x21" + _pack_double(value)
    if isinstance(value, bytes):
        return _field(b"\x3a", value)
    if isinstance(value, Sequence):
        return _field(b"\x2a", b"".join([_field(b"\x0a", _any_value(v)) for v in value]))
    if value is None:
        return b""  # an empty AnyValue, as the SDK writes it
    raise _Unsupported


def _key_value(key: str, value: Any) -> bytes:
    """A ``KeyValue``'s fields: the key (omitted when empty, as proto3 does) and the value."""
    return _text(b"\x0a", key) + _field(b"\x12", _any_value(value))


class OtlpSpanEncoder:
    """Encodes batches of ``ReadableSpan`` as ``ExportTraceServiceRequest`` bytes. One per
    exporter: it keeps the bytes of repeating attributes, the resource and the scope. Used from
    the batch processor's one thread."""

    def __init__(self) -> None:
        # (field tag, key, value type, value) -> the field's bytes
        self._attributes: dict[tuple[bytes, str, type, Any], bytes] = {}
        self._head: tuple[Any, Any, bytes, bytes] | None = None
        self._names: dict[str, bytes] = {}
        self._trace: tuple[int, bytes] = (-1, b"")

    def encode_request(self, spans: Sequence[ReadableSpan]) -> bytes | None:
        """The request's bytes, or None when a span is outside what this encoder covers."""
        if not spans:
            return None
        resource, scope = spans[0].resource, spans[0].instrumentation_scope
        if any(s.resource is not resource or s.instrumentation_scope is not scope for s in spans):
            return None
        try:
            body = b"".join([self._span(span) for span in spans])
            resource_part, scope_part = self._resource_and_scope(resource, scope)
        except (_Unsupported, UnicodeEncodeError, TypeError, OverflowError, struct.error):
            # Values the SDK's encoder drops (or fails on) with its own log line: it decides.
            return None
        scope_spans = _field(b"\x0a", scope_part) + body
        if scope is not None and scope.schema_url:
            scope_spans += _text(b"\x1a", scope.schema_url)
        resource_spans = _field(b"\x0a", resource_part) + _field(b"\x12", scope_spans)
        resource_spans += _text(b"\x1a", resource.schema_url or "")
        return _field(b"\x0a", resource_spans)

    def _resource_and_scope(self, resource: Any, scope: Any) -> tuple[bytes, bytes]:
        head = self._head
        if head is None or head[0] is not resource or head[1] is not scope:
            resource_part = self._attributes_of(b"\x0a", resource.attributes)
            scope_part = b""
            if scope is not None:
                scope_part = _text(b"\x0a", scope.name) + _text(b"\x12", scope.version or "")
                scope_part += self._attributes_of(b"\x1a", scope.attributes)
            head = self._head = (resource, scope, resource_part, scope_part)
        return head[2], head[3]

    def _attributes_of(self, tag: bytes, attributes: Mapping[str, Any] | None) -> bytes:
        if not attributes:
            return b""
        cache = self._attributes
        parts = []
        for key, value in attributes.items():
            kind = type(value)
            # The type is part of the key: True == 1 and hash alike. Floats are not kept
            # (-0.0 == 0.0), nor lists but of text (the common case: finish reasons, paths), nor
            # long text (captured messages: they do not repeat, and would fill memory).
            cached_key: tuple[bytes, str, type, Any] | None = None
            if kind is int or kind is bool or (kind is str and len(value) <= KEPT_TEXT):
                cached_key = (tag, key, kind, value)
            elif (
                (kind is tuple or kind is list)
                and all(type(v) is str for v in value)
                and sum(map(len, value)) <= KEPT_TEXT
            ):
                cached_key = (tag, key, tuple, tuple(value))
            if cached_key is None:
                parts.append(_field(tag, _key_value(key, value)))
                continue
            part = cache.get(cached_key)
            if part is None:
                if len(cache) >= CACHE_LIMIT:
                    cache.clear()
                part = cache[cached_key] = _field(tag, _key_value(key, value))
            parts.append(part)
        return b"".join(parts)

    def _span(self, span: ReadableSpan) -> bytes:
        context = span.context
        if span.links or context is None or context.trace_state:
            raise _Unsupported
        parent = span.parent
        trace = context.trace_id
        if trace != self._trace[0]:  # spans of one trace come in runs
            self._trace = (trace, b"\x0a\x10" + trace.to_bytes(16, "big"))
        head = self._trace[1] + b"\x12\x08" + context.span_id.to_bytes(8, "big")
        if parent is not None:
            head += b"\x22\x08" + parent.span_id.to_bytes(8, "big")
        name = span.name
        named = self._names.get(name)
        if named is None:
            if len(self._names) >= CACHE_LIMIT:
                self._names.clear()
            named = self._names[name] = _text(b"\x2a", name)
        out = [head, named, _KINDS[span.kind]]
        start, end = span.start_time, span.end_time
        if start:
            out.append(b"\x39" + _pack_fixed64(start))
        if end:
            out.append(b"\x41" + _pack_fixed64(end))
        out.append(self._attributes_of(b"\x4a", span.attributes))
        if span.dropped_attributes:
            out.append(b"\x50" + _varint(span.dropped_attributes))
        for event in span.events:
            part = b"\x09" + _pack_fixed64(event.timestamp) if event.timestamp else b""
            part += _text(b"\x12", event.name) + self._attributes_of(b"\x1a", event.attributes)
            if event.dropped_attributes:
                part += b"\x20" + _varint(event.dropped_attributes)
            out.append(_field(b"\x5a", part))
        if span.dropped_events:
            out.append(b"\x60" + _varint(span.dropped_events))
        if span.dropped_links:
            out.append(b"\x70" + _varint(span.dropped_links))
        status = span.status
        if status.status_code is StatusCode.UNSET and not status.description:
            out.append(_STATUS_UNSET)
        else:
            code = status.status_code.value
            status_part = _text(b"\x12", status.description or "")
            if code:
                status_part += b"\x18" + _varint(code)
            out.append(_field(b"\x7a", status_part))  # always there, even empty (as the SDK)
        out.append(_FLAGS_REMOTE if parent is not None and parent.is_remote else _FLAGS_LOCAL)
        return _field(b"\x12", b"".join(out))
