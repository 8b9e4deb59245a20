"""Blobs in an LMDB store: appended records and a digest index (issue 36, item 6), and the
records stores wrote before, keyed by digest, still read back, deltas across both included."""

from __future__ import annotations

import random
import zlib
from pathlib import Path

import lmdb

from coder_es.store.blobs import FULL, digest_of
from coder_es.store.config import StoreConfig
from coder_es.store.lmdb import LMDBBlobStore

INDEX_NAME, RECORDS_NAME = LMDBBlobStore.INDEX_NAME, LMDBBlobStore.RECORDS_NAME


def _open(path: Path) -> LMDBBlobStore:
    store = StoreConfig(backend="lmdb", path=path, durable=False).open_blob_store()
    assert isinstance(store, LMDBBlobStore)
    return store


def _pages(path: Path, name: bytes) -> int:
    env = lmdb.open(str(path / "lmdb"), readonly=True, lock=False, max_dbs=64)
    try:
        db = env.open_db(name, create=False)
        with env.begin(db=db) as txn:
            st = txn.stat(db)
        return int(st["leaf_pages"] + st["branch_pages"] + st["overflow_pages"])
    finally:
        env.close()


def test_blobs_written_before_in_the_digest_keyed_table_still_read(tmp_path: Path) -> None:
    path = tmp_path / "store"
    blobs = _open(path)
    old = b"".join(b"line %d of a file stored by an older coder-es\n" % i for i in range(400))
    old_digest = digest_of(old)
    # What stores wrote before: the record under its digest in coder_es.blobs.
    blobs.store.write(
        lambda txn: txn.put(bytes.fromhex(old_digest), FULL + zlib.compress(old), db=blobs._db),
        durable=False,
    )
    blobs.close()

    blobs = _open(path)
    assert blobs.get(old_digest) == old
    assert blobs.has(old_digest)
    again = blobs.put(old)  # stored once: not written a second time in the new layout
    assert again == old_digest
    newer = old.replace(b"line 7 ", b"line seven ")
    new_digest = blobs.put(newer, like=old_digest)  # a delta against the old record
    assert blobs._read(new_digest)[:1] == b"D"  # type: ignore[index]
    assert blobs.get(new_digest) == newer
    assert blobs.get_many([old_digest, new_digest]) == {old_digest: old, new_digest: newer}
    assert sorted(blobs.digests()) == sorted([old_digest, new_digest])
    assert blobs.verify() == []
    blobs.close()


def test_many_small_records_fill_their_pages(tmp_path: Path) -> None:
    # Records the size of a step's deltas (a few hundred bytes), as a session stores them.
    rng = random.Random(36)
    contents = [rng.randbytes(rng.randint(150, 600)) for _ in range(2000)]
    blobs = _open(tmp_path / "new")
    digests = [blobs.put(c) for c in contents]
    assert [blobs.get(d) for d in digests] == contents
    blobs.close()
    new = sum(_pages(tmp_path / "new", n) for n in (INDEX_NAME, RECORDS_NAME))
    before = _open(tmp_path / "before")  # the same records keyed by digest, as before
    for digest, content in zip(digests, contents, strict=True):
        key, record = bytes.fromhex(digest), FULL + zlib.compress(content, 1)
        before.store.write(lambda txn, k=key, r=record: txn.put(k, r, db=before._db), durable=False)
    before.close()
    old = _pages(tmp_path / "before", LMDBBlobStore.DB_NAME)
    # Keyed by their random digests, the records left about a third of their pages empty.
    assert new < old * 0.85, (new, old)
