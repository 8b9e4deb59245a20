"""Merging file *contents* (bytes, or None for an absent file) on top of the text merge.

This is where the file-level cases live: nothing changed on one side, a file deleted on one side
and changed on the other, binary files, and line endings. When the sides disagree only in their
line-ending style (a user's editor converted the file to CRLF while the agent edited it) the merge
runs on LF text and the result takes the disk's style, so a style change is not a conflict on
every line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from coder_es.workspace.merge import ConflictRegion, three_way_merge
from coder_es.workspace.text import Eol, decode_text, eol_style, to_lf, with_eol

MergeKind = Literal["ours", "theirs", "merged", "conflict"]
ConflictReason = Literal["text", "binary", "deleted_on_disk", "changed_on_disk"]


@dataclass(frozen=True, slots=True)
class ContentMerge:
    """``data`` is what the file should hold (None: absent).

    For ``kind == "conflict"`` it is the version with git-style markers, or None when no such
    version exists (binary content, or a deletion on one side).
    """

    kind: MergeKind
    data: bytes | None
    conflicts: tuple[ConflictRegion, ...] = ()
    reason: ConflictReason | None = None


def merge_contents(
    base: bytes | None,
    disk: bytes | None,
    proposed: bytes | None,
    *,
    ours_label: str = "agent",
    theirs_label: str = "disk",
) -> ContentMerge:
    """Merge base->disk (the user's side) with base->proposed (the agent's side)."""
    if proposed == disk:
        return ContentMerge("theirs", disk)
    if disk == base:
        return ContentMerge("ours", proposed)
    if proposed == base:
        return ContentMerge("theirs", disk)
    if disk is None:
        return ContentMerge("conflict", None, reason="deleted_on_disk")
    if proposed is None:
        return ContentMerge("conflict", None, reason="changed_on_disk")
    base_t = decode_text(base if base is not None else b"")
    disk_t = decode_text(disk)
    ours_t = decode_text(proposed)
    if base_t is None or disk_t is None or ours_t is None:
        return ContentMerge("conflict", None, reason="binary")
    styles = [eol_style(t) for t in (base_t, disk_t, ours_t)]
    target: Eol | None = None
    if len(set(styles) - {"none"}) > 1 and "mixed" not in styles:
        # Pure styles that differ: merge on LF, write the result in the style the disk has now.
        target = next(s for s in (styles[1], styles[2], styles[0]) if s != "none")
        base_t, disk_t, ours_t = to_lf(base_t), to_lf(disk_t), to_lf(ours_t)
    result = three_way_merge(
        base_t, disk_t, ours_t, ours_label=ours_label, theirs_label=theirs_label
    )
    text = with_eol(result.text, target) if target is not None else result.text
    data = text.encode("utf-8")
    if result.clean:
        return ContentMerge("merged", data)
    return ContentMerge("conflict", data, result.conflicts, reason="text")
