"""The merge-and-write step shared by the agent's writes and the session's restorations.

Read the disk, merge it with the proposed content against the base, and write the result with a
compare-and-swap; when the disk moved in between, do it again, under the file's lock after the
first loss so that a continuously changing file cannot starve the writer. The file is named by
its directory's descriptor (``merge_at``; the descriptor-based protocol of
``coder_es.workspace.atomic``); ``merge_onto_disk`` opens the directory of a path for a caller
that holds one.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from coder_es.store.blobs import BlobStore
from coder_es.workspace.atomic import compare_and_swap_at, file_lock_at, read_at
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
    """``merge_at`` for the file at ``path`` (its directory made when ``proposed`` is a file);
    the last component is never followed if it is a link."""
    if proposed is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        # Nothing to delete where even the directory is gone.
        base = _base(None, base_hash, proposed, blobs)
        merge = merge_contents(base, None, None, ours_label=ours_label, theirs_label=theirs_label)
        return DiskMerge(None, merge, None)
    try:
        return merge_at(
            dir_fd,
            path.name,
            base_hash,
            proposed,
            blobs,
            name=name,
            policy=policy,
            ours_label=ours_label,
            theirs_label=theirs_label,
            scratch=scratch,
        )
    finally:
        os.close(dir_fd)


def merge_at(
    dir_fd: int,
    file_name: str,
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
    """Bring ``file_name`` in ``dir_fd`` to ``proposed`` merged with any change made on disk
    since ``base_hash``.

    Raises ``WriteConflictError`` (naming ``name``) when every attempt lost the race, and
    ``BlobNotFoundError`` when a real merge is needed but the base is not in the store.
    ``scratch``: where temporary files go (``coder_es.workspace.atomic.scratch_dir``).
    """
    for attempt in range(MAX_ATTEMPTS):
        locked = attempt > 0
        with file_lock_at(dir_fd, file_name) if locked else contextlib.nullcontext():
            disk, _mode = read_at(dir_fd, file_name)
            base = _base(disk, base_hash, proposed, blobs)
            merge = merge_contents(
                base, disk, proposed, ours_label=ours_label, theirs_label=theirs_label
            )
            target = _target(merge, disk, policy)
            if target == disk or compare_and_swap_at(
                dir_fd, file_name, target, expected=disk, locked=locked, scratch=scratch
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
