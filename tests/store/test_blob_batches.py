"""Reading and writing many blobs at once gives what one-at-a-time calls give, on every backend."""

from __future__ import annotations

import hashlib
import itertools

from coder_es.application import CoderApp
from coder_es.store.config import StoreConfig


def _versions(n: int) -> list[bytes]:
    """Successive versions of a file big enough to be stored as deltas of each other."""
    lines = [b"line %d of a file that is long enough for deltas\n" % i for i in range(60)]
    out = []
    for v in range(n):
        lines[v % 60] = b"version %d changed this line\n" % v
        out.append(b"".join(lines))
    return out


def test_put_many_and_get_many_round_trip_with_delta_chains(store_config: StoreConfig) -> None:
    app = CoderApp(store_config)
    try:
        blobs = app.blobs
        versions = _versions(20)
        first = blobs.put(versions[0])
        # Each version as a delta of the previous one: get_many must follow the chains.
        items = [(v, hashlib.sha256(p).hexdigest()) for p, v in itertools.pairwise(versions)]
        digests = blobs.put_many(items)
        assert digests == [hashlib.sha256(v).hexdigest() for v in versions[1:]]
        assert blobs.stored_size(digests[-1]) < len(versions[-1]) // 4  # really a delta
        missing = hashlib.sha256(b"never stored").hexdigest()
        got = blobs.get_many([first, *digests, missing, "not-a-digest"])
        assert got == {hashlib.sha256(v).hexdigest(): v for v in versions}
        assert all(blobs.get(d) == got[d] for d in digests)
        # Putting again stores nothing new and returns the same digests.
        assert blobs.put_many([(v, None) for v in versions]) == [first, *digests]
        assert blobs.get_many([]) == {}
    finally:
        app.close()
