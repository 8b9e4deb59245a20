"""The merge-and-write step shared by the agent's writes and the session's restorations.

Read the disk, merge it with the proposed content against the base, and write the result with a
compare-and-swap; when the disk moved in between, do it again, under the file's lock after the
first loss so that a continuously changing file cannot starve the writer.
"""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from coder_es.store.blobs import BlobStore
from coder_es.workspace.atomic import compare_and_swap, file_lock, read_current
from coder_es.workspace.contents import ContentMerge, merge_contents
from coder_es.workspace.errors import WriteConflictError

ConflictPolicy = Literal["refuse", "markers"]
MAX_ATTEMPTS = 8


@dataclass(frozen=True, slots=True)
class DiskMerge:
    """One completed merge-and-write.

    ``disk`` is what the file held when the merge was computed, ``written`` what it holds now
    (equal to ``disk`` when nothing was written, as for a refused conflict).
    """

    disk: bytes | None
    merge: ContentMerge
    written: bytes | None


def digest(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def merge_onto_disk(
    path: Path,
    base_hash: str | None,
    proposed: bytes | None,
    blobs: BlobStore,
    *,
    name: str,
    policy: ConflictPolicy,
    ours_label: str,
    theirs_label: str,
    scratch: Path | None = None,
) -> DiskMerge:
    """Bring ``path`` to ``proposed`` merged with any change made on disk since ``base_hash``.

    Raises ``WriteConflictError`` (naming ``name``) when every attempt lost the race, and
    ``BlobNotFoundError`` when a real merge is needed but the base is not in the store.
    ``scratch``: where temporary files go (``coder_es.workspace.atomic.scratch_dir``).
    """
    for attempt in range(MAX_ATTEMPTS):
        locked = attempt > 0
        with file_lock(path) if locked else contextlib.nullcontext():
            disk = read_current(path)
            base = _base(disk, base_hash, proposed, blobs)
            merge = merge_contents(
                base, disk, proposed, ours_label=ours_label, theirs_label=theirs_label
            )
            target = _target(merge, disk, policy)
            if target == disk or compare_and_swap(
                path, target, expected=disk, locked=locked, scratch=scratch
            ):
                return DiskMerge(disk, merge, target)
    raise WriteConflictError(name, MAX_ATTEMPTS)


def _base(
    disk: bytes | None, base_hash: str | None, proposed: bytes | None, blobs: BlobStore
) -> bytes | None:
    """The base's content, loaded only when the merge really needs it.

    When the disk already holds the proposal, or still holds the base, the disk stands in for the
    base (the merge's answer is the same), so a base missing from the store (an imported session)
    does not stop a restoration that needs no merge.
    """
    if proposed == disk or digest(disk) == base_hash:
        return disk
    if disk is not None:
        # Someone else's version is recorded before anything else happens to the file.
        blobs.put(disk, like=base_hash)
    return None if base_hash is None else blobs.get(base_hash)


def _target(merge: ContentMerge, disk: bytes | None, policy: ConflictPolicy) -> bytes | None:
    """What the file should hold after this merge."""
    if merge.kind != "conflict":
        return merge.data
    if policy == "markers" and merge.data is not None:
        return merge.data
    return disk
