"""What a session of many one-line edits stores (issue 36, item 6).

Reproduced: each step's request manifest was stored as a whole compressed blob (~1-4 KB: it
carries the context's "current contents" block of the edited file), and the file's versions
restarted with a whole copy every 17 edits. A session of a read and 30 edits now stores one whole
copy of the file and small deltas, every version and every request reads back exactly, and
``coder-es verify --all`` passes.
"""

from __future__ import annotations

import hashlib
import zlib
from pathlib import Path

from agent_helpers import collect, make_harness, text, tool, turn

from coder_es.agent.request import expand_request
from coder_es.cli.main import main
from coder_es.store.blobs import FULL
from coder_es.store.config import StoreConfig

EDITS = 30


def test_many_one_line_edits_store_deltas_that_read_back_and_verify(tmp_path: Path) -> None:
    config = StoreConfig(backend="lmdb", path=tmp_path / "store")
    h = make_harness(tmp_path, config=config)
    lines = [f"row_{i:04d} = lookup(table, {i}, default=None)  # entry {i}\n" for i in range(1200)]
    (h.root / "big.py").write_text("".join(lines))
    turns = [turn(tool("read", path="big.py"))]
    versions = []
    for k in range(EDITS):
        i = k * 37 % len(lines)
        old, new = f"row_{i:04d} = ", f"row_{i:04d} = 1 + "
        turns.append(turn(tool("edit", path="big.py", old_string=old, new_string=new)))
        lines[i] = lines[i].replace(old, new)
        versions.append("".join(lines).encode())
    turns.append(turn(text("done")))
    handle = h.start(turns, max_steps=EDITS + 5)
    collect(handle, "edit many lines")
    assert (h.root / "big.py").read_bytes() == versions[-1]

    blobs = h.app.blobs
    # Every version the session made reads back exactly.
    for data in versions:
        assert blobs.get(hashlib.sha256(data).hexdigest()) == data
    whole = [d for d in blobs.digests() if blobs._read(d)[:1] == FULL]  # type: ignore[index]
    file_copies = [d for d in whole if blobs.get(d).startswith(b"row_0000")]
    assert len(file_copies) == 1, "one whole copy of the file; every later version a delta"
    # Every request reads back, each extending the one before, and manifests are deltas.
    digests = [e.request_digest for e in h.of(handle, "ModelResponded")]
    assert len(digests) == EDITS + 2
    counts = [len(expand_request(blobs, d)["messages"]) for d in digests]
    assert counts == sorted(counts) and counts[0] < counts[-1]
    stored = sum(blobs.stored_size(d) for d in digests[2:])
    whole = sum(len(zlib.compress(blobs.get(d), 1)) for d in digests[2:])
    assert stored < whole / 2, (stored, whole)  # was about equal: every manifest whole
    h.app.close()
    args = ["--store", str(config.path), "--backend", "lmdb", "--workspace", str(h.root)]
    assert main([*args, "verify", "--all"]) == 0


def test_whole_listings_between_short_manifests_are_deltas_of_the_last_whole_one() -> None:
    """Once the context condenses its history, a request whose condensed head changed lists
    every message (no base), and one whose head held still lists the new ones against the
    previous manifest; the two alternate. A whole listing was stored as a delta of the short
    manifest before it, repeating every message it lists (the first read's 100 KB: ~16 KB a
    time); stored against the last whole listing, it costs its changes, and each still expands
    to exactly the request sent."""
    from coder_es.agent.request import RequestRecorder
    from coder_es.providers.types import ModelRequest, canonical_request
    from coder_es.store.blobs import MemoryBlobStore

    blobs = MemoryBlobStore()
    recorder = RequestRecorder(blobs)
    body = "".join(
        f"row_{i:04d} = lookup(table, {i}, default=None)  # entry {i}\n" for i in range(2000)
    )
    read = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "r", "content": body}],
    }
    recorded: list[tuple[str, ModelRequest]] = []
    messages: list[dict] = [{"role": "user", "content": "condensed: nothing yet"}, read]
    previous: list[dict] = []
    for step in range(12):
        messages = [*messages, {"role": "assistant", "content": f"step {step}"}]
        messages = [*messages, {"role": "user", "content": f"result {step}"}]
        if step % 2 == 0:  # the condensed head changes: a whole listing
            messages = [{"role": "user", "content": f"condensed: up to {step}"}, *messages[1:]]
        request = ModelRequest(model="m", messages=messages)
        stable = 0
        for a, b in zip(previous, messages, strict=False):
            if a != b:
                break
            stable += 1
        recorded.append((recorder.record(request, stable), request))
        previous = messages
    for digest, request in recorded:
        expanded = expand_request(blobs, digest)
        assert expanded == {k: v for k, v in canonical_request(request).items() if k in expanded}
    whole = len(zlib.compress(blobs.get(recorded[2][0]), 1))
    later = [blobs.stored_size(d) for d, _ in recorded[2:] if blobs.get(d).count(b"row_") > 1000]
    assert len(later) == 5
    assert max(later) < whole / 10, (later, whole)  # each was a near-whole copy
