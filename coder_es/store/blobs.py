"""A content-addressed blob store: sha256 keys, identical content stored once.

Blobs hold file snapshots, large tool outputs and raw model streams. Each backend only has to
store opaque records by key (``_read`` / ``_write_if_absent``); encoding lives here, once:

    record = b"Z" + zlib(content)                             a full copy
           | b"D" + depth(1) + base digest(32) + zlib(ops)    a delta against another blob
           | b"S" + scope(16) + zlib(redacted content)        sealed: holds a secret

A caller that knows the previous version of the same file passes it as ``like=`` so the new
version is stored as a delta when that is smaller (chains are bounded by ``max_chain`` so reading
any version back stays fast; a version that would go deeper is a delta against an ancestor
half-way up its chain while that stays small). The key is always the sha256 of the *content*,
so identical content is stored once whichever way it was encoded, and ``get`` checks the hash
of what it returns.

Content holding a secret (``sealing.has_secret``) is SEALED whole: the exact bytes go to the
sealed-secret store of the session that stored them (``for_session``; ``STORE_SCOPE`` when no
session is known), encrypted, and the record keeps only the redacted form, which exports and
cassettes read (``stored_form``) without any key. ``get`` opens the sealed copy (restoring a
file needs the exact bytes). The key stays the sha256 of the real content: events and the
workspace compare it with what is on disk; docs/DESIGN.md ("Secrets are sealed") says what such
a digest can and cannot reveal.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterable, Iterator, Mapping
from typing import Protocol
from uuid import UUID

from coder_es.errors import BlobNotFoundError, CoderESError, StoreError

FULL = b"Z"
DELTA = b"D"
SEALED = b"S"
# Whole contents are compressed at zlib level 1: on source text it is ~3x faster than level 6
# for ~20% more bytes (4 MB of this package: 41 vs 139 ms, ratio 2.99 vs 3.67), and a read
# or a write stores a blob on the turn's path. Deltas are small and keep level 6. Any level
# decompresses the same way, so stores written before read unchanged.
WHOLE_LEVEL = 1
# A whole copy that ends a delta chain at its deepest (every ~40 versions of a file edited line
# by line) is one write in dozens, not the read or write the turn waits for: level 6, ~20%
# fewer bytes for a few ms (500 one-line edits: ~50 KB less; issue 36, item 6).
RESTART_LEVEL = 6
STORE_SCOPE = UUID(int=0)
"""Where blobs stored outside any session are sealed (``forget --all`` shreds it)."""
_COPY = 0
_INSERT = 1
# A delta's operations are zlib-compressed with the last 32 KB of its base as the preset
# dictionary: what a step inserts (a tool result's diff, a manifest's new messages) is much
# like what the base ends with, so deflate refers back to it (500 one-line edits of a 100 KB
# file: the manifests' per-step deltas 0.34 -> 0.17 MB; issue 36, item 6). The zlib header
# says whether a stream needs a dictionary (and checks it by its Adler-32), so deltas written
# before, without one, read back unchanged.
_DICT_SIZE = 32 * 1024


def digest_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class BlobSealer(Protocol):
    """What the blob store needs from the sealed-secret store (``coder_es.sealing.Sealing``)."""

    def has_secret(self, data: bytes) -> bool: ...

    def seal_blob(self, scope: UUID, digest: str, data: bytes) -> bytes:
        """Seal ``data`` whole in ``scope``; return its redacted form."""
        ...

    def open_blob(self, scopes: list[UUID], digest: str) -> bytes:
        """The sealed content from the first scope holding it."""
        ...

    def note_stored_form(self, scope: UUID, digest: str, stored_digest: str) -> None:
        """``digest`` is kept in ``scope`` with a stored (redacted) form of ``stored_digest``:
        the next event of that session naming ``digest`` records it, so the chain covers the
        stored form too (``Session.trigger_event``, verified by ``coder_es.audit.verify``)."""
        ...


class BlobStore(ABC):
    """Content-addressed storage on the same backend as the events."""

    sealing: BlobSealer | None = None
    scope: UUID = STORE_SCOPE
    # Deepest delta chain: reading a version decodes at most this many deltas (~0.03 ms each
    # for a 100 KB file: ~1 ms CPU at 32; a heavily loaded machine has shown 3x that); a longer
    # chain is rebased half-way up (``_delta_record``). Shorter chains rebase more often,
    # against an ancestor further back, and each rebase or whole copy repeats the edits it
    # spans: 500 one-line edits of a 100 KB file stored their request manifests and versions in
    # 1.13 MB at 16, 0.93 MB at 32, 0.86 MB at 64 (reads up to 9.5 ms CPU under a load of 16:
    # too close to the 10 ms bound), 0.74 MB at 128 (issue 36, item 6).
    # Writing or reading a delta decodes its base, which is nearly always one of the last
    # blobs ``put`` stored here (``_recent``), so deep chains do not slow the loop, which reads
    # back the file versions it just wrote.
    max_chain = 32
    rebase_share = 8
    _recent: dict[str, bytes] | None = None
    """The digests and contents of the last few blobs ``put`` stored here (likely bases)."""
    _RECENT = 4
    # Deltas are only tried for content at least this big; below it zlib alone is as good.
    min_delta_size = 1024

    # -- what a backend implements -------------------------------------------------

    @abstractmethod
    def _read(self, digest: str) -> bytes | None:
        """The stored record for ``digest``, or None."""

    @abstractmethod
    def _write_if_absent(self, digest: str, record: bytes) -> None:
        """Store ``record`` under ``digest`` unless the key exists (then do nothing)."""

    @abstractmethod
    def _digests(self) -> Iterator[str]:
        """Every stored key (for verification and export)."""

    def _read_many(self, digests: Collection[str]) -> dict[str, bytes]:
        """The stored records of those ``digests`` that exist. Backends override this with one
        transaction or query for all of them."""
        found = {}
        for digest in digests:
            record = self._read(digest)
            if record is not None:
                found[digest] = record
        return found

    def _write_many(self, records: Mapping[str, bytes]) -> None:
        """``_write_if_absent`` for each; backends override this with one transaction."""
        for digest, record in records.items():
            self._write_if_absent(digest, record)

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release backend resources."""

    # -- the public surface --------------------------------------------------------

    def put(self, data: bytes, *, like: str | None = None) -> str:
        """Store ``data`` (once) and return its sha256 hex digest.

        ``like`` names a blob that is probably similar (the previous version of the same file); the
        content is then stored as a delta against it when that is smaller.
        """
        digest = digest_of(data)
        existing = self._read(digest)
        if existing is not None:
            if (
                existing[:1] == SEALED
                and self.sealing is not None
                and existing[1:17] != (self.scope.bytes)
            ):
                # This scope keeps its own sealed copy: forgetting another session must not
                # take away content this one recorded.
                self.sealing.seal_blob(self.scope, digest, data)
                self._note_stored_form(digest)
            return digest
        if self.sealing is not None and self.sealing.has_secret(data):
            redacted = self.sealing.seal_blob(self.scope, digest, data)
            self._write_if_absent(
                digest, SEALED + self.scope.bytes + zlib.compress(redacted, WHOLE_LEVEL)
            )
            self._note_stored_form(digest)
            return digest
        self._write_if_absent(digest, self._new_record(data, digest, like))
        if len(data) >= self.min_delta_size:
            self._remember(digest, data)
        return digest

    def _remember(self, digest: str, data: bytes) -> None:
        recent = dict(self._recent or {})  # a new dict: readers on other threads see a whole one
        recent.pop(digest, None)
        recent[digest] = data
        while len(recent) > self._RECENT:
            del recent[next(iter(recent))]
        self._recent = recent

    def _recent_content(self, digest: str) -> bytes | None:
        # Content-addressed: what was put under a digest is its content.
        recent = self._recent
        return recent.get(digest) if recent is not None else None

    def get(self, digest: str) -> bytes:
        data = self._decode(digest, self._record(digest))
        if digest_of(data) != digest:
            msg = f"blob {digest} is corrupt: its content no longer matches its hash"
            raise StoreError(msg)
        return data

    def get_many(self, digests: Iterable[str]) -> dict[str, bytes]:
        """The content of each of ``digests`` that is stored and readable, read in a few
        batches (one per level of delta chains) rather than one read per blob. One that cannot
        be read (missing, corrupt, sealed and forgotten) is left out: ``get`` says why."""
        wanted = set(digests)
        records = self._read_many(wanted)
        asked = set(wanted)
        while True:
            bases = {r[2:34].hex() for r in records.values() if r[:1] == DELTA} - asked
            if not bases:
                break
            asked |= bases
            records.update(self._read_many(bases))
        decoded: dict[str, bytes] = {}
        out = {}
        for digest in wanted & records.keys():
            try:
                data = self._decode(digest, records[digest], records, decoded)
            except CoderESError:
                continue
            if digest_of(data) == digest:
                out[digest] = data
        return out

    def put_many(self, items: Iterable[tuple[bytes, str | None]]) -> list[str]:
        """``put(data, like=like)`` for each item, in one write; returns the digests in order.
        Content to seal goes through ``put`` one at a time (it is rare)."""
        items = list(items)
        digests = [digest_of(data) for data, _like in items]
        present = self._read_many(set(digests))
        records: dict[str, bytes] = {}
        for digest, (data, like) in zip(digests, items, strict=True):
            existing = present.get(digest)
            if digest in records or (existing is not None and existing[:1] != SEALED):
                continue
            if existing is not None or (self.sealing is not None and self.sealing.has_secret(data)):
                self.put(data, like=like)
                continue
            records[digest] = self._new_record(data, digest, like)
        if records:
            self._write_many(records)
        return digests

    def has(self, digest: str) -> bool:
        return self._read(digest) is not None

    def is_sealed(self, digest: str) -> bool:
        return self._record(digest)[:1] == SEALED

    def stored_form(self, digest: str) -> bytes:
        """What the store keeps in clear: the content, or for a sealed blob its redacted form
        (what exports and cassettes carry; needs no key)."""
        record = self._record(digest)
        if record[:1] != SEALED:
            return self.get(digest)
        try:
            return zlib.decompress(record[17:])
        except zlib.error as e:
            msg = f"blob {digest} is corrupt: {e}"
            raise StoreError(msg) from e

    def check(self, digest: str) -> str | None:
        """Raise if ``digest`` is missing or corrupt. A sealed blob's content needs its key,
        which verify must do without: for one, the sha256 of its stored (redacted) form is
        returned, for the caller to compare with the one the chain recorded."""
        if self.is_sealed(digest):
            return digest_of(self.stored_form(digest))
        self.get(digest)
        return None

    def _note_stored_form(self, digest: str) -> None:
        # Read back: another process may have stored the record first (its redaction stands).
        if self.sealing is not None and self.scope != STORE_SCOPE:
            self.sealing.note_stored_form(self.scope, digest, digest_of(self.stored_form(digest)))

    def for_session(self, session: UUID) -> BlobStore:
        """This store, sealing what holds a secret in ``session``'s scope."""
        return ScopedBlobStore(self, session)

    def stored_size(self, digest: str) -> int:
        return len(self._record(digest))

    def digests(self) -> Iterator[str]:
        return self._digests()

    def verify(self) -> list[str]:
        """Digests whose stored content no longer matches the key."""
        bad = []
        for digest in self._digests():
            try:
                self.check(digest)
            except StoreError:
                bad.append(digest)
            except Exception:
                bad.append(digest)
        return bad

    # -- encoding --------------------------------------------------------------------

    def _record(self, digest: str) -> bytes:
        record = self._read(digest)
        if record is None:
            raise BlobNotFoundError(digest)
        return record

    def _depth(self, record: bytes) -> int:
        return record[1] if record[:1] == DELTA else 0

    def _new_record(self, data: bytes, digest: str, like: str | None) -> bytes:
        """The record of new, unsealed content: a delta against ``like`` when that is smaller,
        else a whole copy."""
        level = WHOLE_LEVEL
        if like is not None and like != digest and len(data) >= self.min_delta_size:
            record = self._delta_record(data, like)
            if record is not None:
                return record
            base = self._read(like)
            if base is not None and self._depth(base) >= self.max_chain:
                level = RESTART_LEVEL
        return FULL + zlib.compress(data, level)

    def _delta_record(self, data: bytes, like: str) -> bytes | None:
        base_record = self._read(like)
        if base_record is None or base_record[:1] == SEALED:
            return None
        rebased = False
        if self._depth(base_record) >= self.max_chain:
            # Rebase on an ancestor half-way up the chain rather than start over with a whole
            # copy: the delta then spans a few versions' changes (a few lines for one-line
            # edits) instead of ~30 KB of compressed file every ``max_chain`` versions, and
            # every chain stays at most ``max_chain`` deep, so any version reads back fast.
            # The ancestor is the same one until a whole copy is made, so those deltas grow
            # with every rebase: past ``1 / rebase_share`` of a whole copy, a whole copy it is.
            rebased = True
            while self._depth(base_record) > self.max_chain // 2:
                like = base_record[2:34].hex()
                found = self._read(like)
                if found is None or found[:1] == SEALED:
                    return None
                base_record = found
        depth = self._depth(base_record) + 1
        base = self._recent_content(like)
        if base is None:
            base = self._decode(like, base_record)
        ops = _compress_ops(_encode_delta(base, data), base)
        full_size = len(zlib.compress(data, 1))
        if len(ops) + 34 >= (full_size // self.rebase_share if rebased else full_size):
            return None
        return DELTA + bytes([depth]) + bytes.fromhex(like) + ops

    def _decode(
        self,
        digest: str,
        record: bytes,
        records: Mapping[str, bytes] | None = None,
        decoded: dict[str, bytes] | None = None,
    ) -> bytes:
        """The content of ``record``; delta bases come from ``records`` when given (a batch
        read), and decoded contents are remembered in ``decoded`` (shared bases decode once)."""
        if decoded is not None and digest in decoded:
            return decoded[digest]
        kind = record[:1]
        data: bytes | None = None
        try:
            if kind == FULL:
                data = zlib.decompress(record[1:])
            elif kind == DELTA:
                base_digest = record[2:34].hex()
                base = self._recent_content(base_digest)
                if base is None:
                    base_record = records.get(base_digest) if records is not None else None
                    if base_record is None:
                        base_record = self._record(base_digest)
                    base = self._decode(base_digest, base_record, records, decoded)
                data = _apply_delta(base, _decompress_ops(record[34:], base))
            elif kind == SEALED:
                if self.sealing is None:
                    msg = f"blob {digest} is sealed and this store has no sealing key"
                    raise StoreError(msg)
                scopes = list(dict.fromkeys([self.scope, UUID(bytes=record[1:17])]))
                data = self.sealing.open_blob(scopes, digest)
        except (zlib.error, struct.error, IndexError) as e:
            msg = f"blob {digest} is corrupt: {e}"
            raise StoreError(msg) from e
        if data is None:
            msg = f"blob {digest} has an unknown record kind {kind!r}"
            raise StoreError(msg)
        if decoded is not None:
            decoded[digest] = data
        return data


# Where content is cut into the units a delta matches: after a line break, or after an escaped
# one (``\\n`` inside a JSON string). Request manifests and other JSON blobs are one long line
# whose text keeps its lines escaped; cut on lines alone, two manifests that share all but one
# line of a file's contents would share nothing. Only the encoder cuts: a delta is plain
# copy/insert operations, so records written with any cutting read back the same way.
_ESCAPED_BREAK = b"\\n"


def _units(data: bytes) -> list[bytes]:
    if _ESCAPED_BREAK not in data:  # most file versions: lines, at splitlines' speed
        return data.splitlines(keepends=True)
    units: list[bytes] = []
    for line in data.splitlines(keepends=True):
        if _ESCAPED_BREAK not in line:
            units.append(line)
            continue
        *cut, last = line.split(_ESCAPED_BREAK)
        units.extend(part + _ESCAPED_BREAK for part in cut)
        if last:
            units.append(last)
    return units


def _encode_delta(base: bytes, data: bytes) -> bytes:
    """Copy/insert operations turning ``base`` into ``data``, matched on lines (escaped ones
    included, see ``_units``)."""
    base_lines = _units(base)
    data_lines = _units(data)
    offsets = [0]
    for line in base_lines:
        offsets.append(offsets[-1] + len(line))
    out = bytearray()
    from difflib import SequenceMatcher  # only when a delta is computed (start-up time)

    matcher = SequenceMatcher(None, base_lines, data_lines, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            out += struct.pack(">BII", _COPY, offsets[i1], offsets[i2] - offsets[i1])
        elif j2 > j1:
            chunk = b"".join(data_lines[j1:j2])
            out += struct.pack(">BI", _INSERT, len(chunk)) + chunk
    return bytes(out)


def _compress_ops(ops: bytes, base: bytes) -> bytes:
    c = zlib.compressobj(
        6, zlib.DEFLATED, zlib.MAX_WBITS, 9, zlib.Z_DEFAULT_STRATEGY, base[-_DICT_SIZE:]
    )
    return c.compress(ops) + c.flush()


def _decompress_ops(stream: bytes, base: bytes) -> bytes:
    """A delta's operations, compressed with or without the base's tail as dictionary."""
    d = zlib.decompressobj(zlib.MAX_WBITS, base[-_DICT_SIZE:])
    ops = d.decompress(stream) + d.flush()
    if not d.eof:
        raise zlib.error("a delta's operations are cut short")
    return ops


def _apply_delta(base: bytes, ops: bytes) -> bytes:
    out = bytearray()
    view = memoryview(base)  # slices of a view copy once, into ``out``
    pos = 0
    while pos < len(ops):
        op = ops[pos]
        if op == _COPY:
            start, length = struct.unpack_from(">II", ops, pos + 1)
            out += view[start : start + length]
            pos += 9
        elif op == _INSERT:
            (length,) = struct.unpack_from(">I", ops, pos + 1)
            out += ops[pos + 5 : pos + 5 + length]
            pos += 5 + length
        else:
            msg = f"unknown delta op {op}"
            raise struct.error(msg)
    return bytes(out)


class MemoryBlobStore(BlobStore):
    """Blobs in a dict (the ``popo`` backend, and tests)."""

    def __init__(self) -> None:
        self._records: dict[str, bytes] = {}

    def _read(self, digest: str) -> bytes | None:
        return self._records.get(digest)

    def _write_if_absent(self, digest: str, record: bytes) -> None:
        self._records.setdefault(digest, record)

    def _digests(self) -> Iterator[str]:
        return iter(list(self._records))


class ScopedBlobStore(BlobStore):
    """The same records, sealing in one session's scope (``BlobStore.for_session``)."""

    def __init__(self, inner: BlobStore, scope: UUID) -> None:
        self.inner = inner
        self.scope = scope
        self.sealing = inner.sealing
        self.max_chain = inner.max_chain

    def _read(self, digest: str) -> bytes | None:
        return self.inner._read(digest)

    def _write_if_absent(self, digest: str, record: bytes) -> None:
        self.inner._write_if_absent(digest, record)

    def _read_many(self, digests: Collection[str]) -> dict[str, bytes]:
        return self.inner._read_many(digests)

    def _write_many(self, records: Mapping[str, bytes]) -> None:
        self.inner._write_many(records)

    def _digests(self) -> Iterator[str]:
        return self.inner._digests()
