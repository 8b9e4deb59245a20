"""Events' stored state, compressed: the mapper's compressor (``COMPRESSOR_TOPIC``), as the
eventsourcing library applies one between the transcoder and the recorder.

A session's events are small JSON objects that share their keys, their value shapes and a few
long strings (the timestamp's type tag, hash fields, tool names): zlib alone halves them, zlib
primed with a dictionary of those shared parts (``DICTIONARY_V1``) leaves about a third, where
the edits of a file spend most of a store's bytes (issue 36, item 6).

    state = JSON text (starts with ``{``: small states, and every state written before this)
          | b"\\x01" + raw deflate of the JSON text, primed with ``DICTIONARY_V1``

Small states stay as they are: compressing them saves little and costs a call per read. What
is written is fixed forever per tag (a new dictionary is a new tag), so every store reads back.

Every application reads both forms. Writing compressed states is the default
(``CoderApp``'s ``COMPRESSOR_TOPIC`` is ``READ_WRITE_TOPIC``); a store may choose JSON text with
``COMPRESSOR_TOPIC=`` ``READ_TOPIC`` (the eventsourcing library's setting,
``CODER_ES_COMPRESSOR_TOPIC`` for this application). The hash chain covers an event's decoded
fields (``domain.chain``), not its stored bytes: what verification finds is the same either way,
and a state that no longer decompresses is a damaged event like unreadable JSON.
"""

from __future__ import annotations

import zlib

from eventsourcing.persistence import Compressor

from coder_es.errors import StoreError

TAG_V1 = b"\x01"
MIN_SIZE = 192
"""States shorter than this are stored as JSON text."""
_LEVEL = 6
_WBITS = -15  # raw deflate: the tag says what it is, no zlib header or checksum is needed

# The parts of event states that recur (keys, value shapes, tags), the most common last: deflate
# finds nearer matches cheaper. Never edit it: stored states are decoded with it.
DICTIONARY_V1 = (
    b'"reason":"","source":"","suggested_pattern":null,"tool_use_ids":[],"covers":[],'
    b'"produced_by":"","summary":"","entries":[],"previous":null,"context_budget":null,'
    b'"hooks":[],"hook":"","hook_event":"","effect":"","exit_code":0,"stderr":"","digest":"'
    b'"servers":[],"child_session":"","description":"","harness":"","harness_session":null,'
    b'"request_blob":null,"response_blob":null,"request_headers":{},"response_headers":{},'
    b'"status":200,"method":"POST","error":null,"cost_usd":null,"attempt":1,"retryable":true,'
    b'"delay_s":1.0,"kind":"","message":"","steps":0,"by":"","rules":[],"default":"ask",'
    b'"settings":{},"agent":"build","title":"","workspace":"/","parent_session":null,'
    b'"parent_node":null,"originator_topic":"coder_es.domain.session:Session",'
    b'"hash":"","size":0,"name":"","node":"1","content":[{"type":"text","text":"'
    b'"matched_rule":null,"decided_by":"user","decision":"deny","scope":"always",'
    b'"pattern":null,"tool":"bash","subject":"","decision":"allow","scope":"once",'
    b'"stop_reason":"end_turn","blocks":[{"type":"text","text":""}],'
    b'"blocks":[{"type":"tool_use","id":"toolu_","name":"read","input":{"path":""}}],'
    b'"stop_reason":"tool_use","usage":{"input_tokens":0,"output_tokens":0,'
    b'"cache_read_tokens":0,"cache_write_tokens":0},"provider":"anthropic","model":"",'
    b'"request_id":null,"request_digest":"","raw_stream_blob":null}'
    b'"tool_use_id":"toolu_","name":"bash","input":{"command":""}}'
    b'"output":"","output_blob":null,"is_error":false,"duration_ms":0,"files_changed":[]}'
    b'"outcome":"direct","conflicts":0}'
    b'"output":"Edited \\n--- a/\\n+++ b/\\n@@ -1,7 +1,7 @@\\n",'
    b'"output_blob":null,"is_error":false,"duration_ms":1,'
    b'"files_changed":[{"path":"","before":"","after":""}]}'
    b'"tool_use_id":"toolu_","tool":"edit","subject":"","decision":"allow","scope":"once",'
    b'"pattern":null,"matched_rule":"user:allow edit","decided_by":"rule",'
    b'"reason":"allow by user:allow edit"}'
    b'"tool_use_id":"toolu_","name":"edit","input":{"path":"","old_string":"","new_string":""}}'
    b'"path":"","tool_use_id":"toolu_","base":"","disk":"","proposed":"","result":"",'
    b'{"timestamp":{"_type_":"datetime_iso","_data_":"2026-01-01T00:00:00.000000+00:00"},'
    b'"prev_hash":"","parent":"","node":"'
)


READ_TOPIC = "coder_es.store.compression:EventReader"
READ_WRITE_TOPIC = "coder_es.store.compression:EventCompressor"


class EventReader(Compressor):
    """Reads plain and compressed states; writes them plain."""

    def compress(self, data: bytes) -> bytes:
        return data

    def decompress(self, data: bytes) -> bytes:
        if data[:1] != TAG_V1:
            return data
        try:
            d = zlib.decompressobj(_WBITS, DICTIONARY_V1)
            out = d.decompress(data[1:])
            if not d.eof:
                # A whole state ends its stream in one call; flush() allocates a 16 KiB
                # buffer even when there is nothing left (~12% of a state's decompression).
                out += d.flush()
        except zlib.error as e:
            raise StoreError(f"a stored event's state does not decompress: {e}") from e
        if not d.eof:
            raise StoreError("a stored event's state is cut short")
        return out


class EventCompressor(EventReader):
    """Compresses a state of ``MIN_SIZE`` bytes or more; reads both forms back."""

    def compress(self, data: bytes) -> bytes:
        if len(data) < MIN_SIZE:
            return data
        c = zlib.compressobj(
            _LEVEL, zlib.DEFLATED, _WBITS, 9, zlib.Z_DEFAULT_STRATEGY, DICTIONARY_V1
        )
        return TAG_V1 + c.compress(data) + c.flush()
