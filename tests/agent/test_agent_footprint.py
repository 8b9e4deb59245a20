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
