"""Delta chains stay bounded without whole copies, and JSON blobs delta against each other
(issue 36, item 6: the store's footprint for many one-line edits).

Reproduced: 500 one-line edits of a 100 KB file stored a whole compressed copy of the file every
17 versions (a chain at its maximum depth started over), and every request manifest whole (a
manifest is one JSON line, and deltas matched whole lines only).
"""

from __future__ import annotations

import hashlib
import json
import random

from coder_es.application import CoderApp
from coder_es.store.blobs import DELTA, FULL, BlobStore
from coder_es.store.config import StoreConfig


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_versions(n: int) -> list[bytes]:
    """A 16 KB file, each version editing one more distinct line."""
    rng = random.Random(5)  # varied text: a whole copy compresses like source code, not 50x
    lines = [b"v%04d = %s\n" % (i, rng.randbytes(16).hex().encode()) for i in range(400)]
    out = [b"".join(lines)]
    for v in range(1, n):
        i = (v * 37) % len(lines)
        lines[i] = b"edited_" + lines[i]
        out.append(b"".join(lines))
    return out


def _depth(blobs: BlobStore, digest: str) -> int:
    record = blobs._read(digest)
    assert record is not None
    return record[1] if record[:1] == DELTA else 0


def test_a_long_edit_history_keeps_one_whole_copy_and_bounded_chains(
    store_config: StoreConfig,
) -> None:
    app = CoderApp(store_config)
    try:
        blobs = app.blobs
        versions = _file_versions(60)
        digests = [blobs.put(versions[0])]
        for data in versions[1:]:
            digests.append(blobs.put(data, like=digests[-1]))
        kinds = [blobs._read(d)[:1] for d in digests]  # type: ignore[index]
        # A chain at its maximum depth used to start over with a whole copy (every 17 versions:
        # 4 here); it now rebases half-way up, until such deltas reach 1/8 of a whole copy.
        assert kinds[0] == FULL and kinds.count(FULL) <= 2, kinds
        assert max(_depth(blobs, d) for d in digests) <= blobs.max_chain
        whole = blobs.stored_size(digests[0])
        deltas = [blobs.stored_size(d) for d, k in zip(digests, kinds, strict=True) if k == DELTA]
        assert max(deltas) <= whole / blobs.rebase_share
        assert sum(blobs.stored_size(d) for d in digests) < 3.5 * whole  # was > 4 whole copies
        assert blobs.verify() == []
        assert [blobs.get(d) for d in digests] == versions
        assert blobs.get_many(digests) == dict(zip(digests, versions, strict=True))
    finally:
        app.close()
    if store_config.backend == "popo":  # nothing outlives the process
        return
    reopened = CoderApp(store_config)
    try:
        assert all(reopened.blobs.get(d) == v for d, v in zip(digests, versions, strict=True))
    finally:
        reopened.close()


def test_chains_written_deeper_than_the_bound_still_read_and_rebase(
    store_config: StoreConfig,
) -> None:
    """Chains deeper than the bound (written with another one) read unchanged, and their
    next version rebases within the bound."""
    app = CoderApp(store_config)
    try:
        blobs = app.blobs
        bound = type(blobs).max_chain
        versions = _file_versions(bound + 12)
        digests = [blobs.put(versions[0])]
        blobs.max_chain = bound + 4
        for data in versions[1 : bound + 5]:
            digests.append(blobs.put(data, like=digests[-1]))
        assert _depth(blobs, digests[-1]) == bound + 4
        blobs.max_chain = bound
        for data in versions[bound + 5 :]:
            digests.append(blobs.put(data, like=digests[-1]))
        assert _depth(blobs, digests[bound + 5]) == bound // 2 + 1
        assert [blobs.get(d) for d in digests] == versions
        assert blobs.verify() == []
    finally:
        app.close()


def test_one_line_json_blobs_are_deltas_of_each_other(store_config: StoreConfig) -> None:
    """Two request-manifest-like blobs (one JSON line, the text's lines escaped) that differ in
    one line of a long text: the second is stored as a small delta."""
    text = "".join(f"line {i}: some source text of the file in the context\n" for i in range(300))
    first = json.dumps({"messages": [{"role": "user", "text": text}]}).encode()
    second = json.dumps(
        {"messages": [{"role": "user", "text": text.replace("line 150:", "line 150 (edited):")}]}
    ).encode()
    assert first.count(b"\n") == 0
    app = CoderApp(store_config)
    try:
        blobs = app.blobs
        a = blobs.put(first)
        b = blobs.put(second, like=a)
        assert blobs._read(b)[:1] == DELTA  # type: ignore[index]
        assert blobs.stored_size(b) < blobs.stored_size(a) / 4
        assert blobs.get(b) == second and _sha(second) == b
    finally:
        app.close()


def _diff_log(rng: random.Random, steps: int) -> str:
    words = ["def", "return", "self", "value", "index", "result", "items", "for", "in", "if"]
    out = []
    for _ in range(steps):
        at = rng.randrange(2000)
        hunk = [f" x{at + k:05d} " + " ".join(rng.choices(words, k=6)) for k in range(3)]
        hunk += [f"-x{at + 3:05d} old", f"+x{at + 3:05d} edited old"]
        out.append(f"Edited big.py\n--- a/big.py\n+++ b/big.py\n@@ -{at},7 +{at},7 @@\n")
        out.append("\n".join(hunk) + "\n")
    return "".join(out)


def test_a_delta_is_compressed_against_its_base(store_config: StoreConfig) -> None:
    """What a delta inserts (a new tool result's diff) is much like the end of its base (the
    earlier results): its operations are deflated with the base's tail as dictionary, and are
    smaller than deflated alone; a delta written before, deflated alone, reads back unchanged."""
    import zlib

    from coder_es.store.blobs import _encode_delta

    rng = random.Random(3)
    history = _diff_log(rng, 60)
    first = json.dumps({"messages": [{"role": "user", "text": history}]}).encode()
    second = json.dumps(
        {"messages": [{"role": "user", "text": history + _diff_log(rng, 1)}]}
    ).encode()
    app = CoderApp(store_config)
    try:
        blobs = app.blobs
        a = blobs.put(first)
        b = blobs.put(second, like=a)
        record = blobs._read(b)
        assert record is not None and record[:1] == DELTA
        alone = zlib.compress(_encode_delta(first, second), 6)
        assert len(record) - 34 < 0.8 * len(alone), (len(record) - 34, len(alone))
        assert blobs.get(b) == second
        # A delta record as written before: its operations deflated without a dictionary.
        third = second.replace(b"edited old", b"edited twice")
        c = _sha(third)
        old_form = (
            DELTA + bytes([1]) + bytes.fromhex(a) + zlib.compress(_encode_delta(first, third), 6)
        )
        blobs._write_if_absent(c, old_form)
        assert blobs.get(c) == third
        assert blobs.verify() == []
    finally:
        app.close()
