"""The three-way merge: base = what the agent saw, theirs = the disk now, ours = the agent's result.

The alignment is merge3's (sync regions where both sides still match the base), computed with
patiencediff's ``PatienceSequenceMatcher``: on real merge histories it agrees with git far more
often than difflib's matcher. On top of merge3 the conflicts are post-processed the way
``git merge-file`` (xdiff's ``XDL_MERGE_ZEALOUS_ALNUM`` level) does it, so that the markers we
write look like the ones a user already knows:

- a conflict whose two sides share lines is refined: the shared lines are taken, only the lines
  that really differ stay in conflict (xdiff ``xdl_refine_conflicts``);
- two conflicts separated by at most three lines, or by lines without any letter or digit, are
  shown as one (``xdl_simplify_non_conflicts``): splitting them would not make them easier to read;
- a side whose last line has no newline gets one inside the conflict block, so a marker is never
  glued onto the end of a line (merge3 would write ``last line=======``);
- marker lines use CRLF when the surrounding lines of both sides do (xdiff ``is_cr_needed``).

Lines are split on ``\\n`` only, as git does: ``str.splitlines`` would also split on ``\\r``,
form feeds and Unicode separators and so would disagree with git and change files on the way.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import merge3
from patiencediff import PatienceSequenceMatcher

from coder_es.workspace.text import split_lines

MarkerStyle = Literal["merge", "diff3"]

_ALNUM = re.compile(r"[A-Za-z0-9]")
MARKER_SIZE = 7
# patiencediff's matcher has difflib's interface; merge3 types it with its own Protocol.
_MATCHER: Any = PatienceSequenceMatcher


@dataclass(frozen=True, slots=True)
class ConflictRegion:
    """One conflicting region, with all three sides (text, newlines included).

    ``start``/``end`` locate the ours side in the ours text (0-based line numbers, end exclusive),
    ``base_start``/``base_end`` and ``theirs_start``/``theirs_end`` likewise.
    """

    base: str
    theirs: str
    ours: str
    base_start: int
    base_end: int
    theirs_start: int
    theirs_end: int
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class MergeResult:
    """``text`` is the merge; when ``clean`` is False it contains git-style conflict markers."""

    text: str
    clean: bool
    conflicts: tuple[ConflictRegion, ...]


# A region: kind, then half-open ranges in base, ours and theirs.
_Kind = Literal["unchanged", "ours", "theirs", "same", "conflict"]


@dataclass(slots=True)
class _Region:
    kind: _Kind
    z1: int
    z2: int
    a1: int
    a2: int
    b1: int
    b2: int


def three_way_merge(
    base: str,
    theirs: str,
    ours: str,
    *,
    ours_label: str = "agent",
    theirs_label: str = "disk",
    base_label: str = "base",
    style: MarkerStyle = "merge",
) -> MergeResult:
    """Merge the changes base->theirs and base->ours.

    The conflict blocks show ours first (``<<<<<<< ours_label``), then theirs, as
    ``git merge-file -p ours base theirs`` does; ``style="diff3"`` adds the base between them.
    """
    base_lines = split_lines(base)
    ours_lines = split_lines(ours)
    theirs_lines = split_lines(theirs)
    # The common cases need no diff at all.
    if ours == theirs or theirs == base:
        return MergeResult(ours, True, ())
    if ours == base:
        return MergeResult(theirs, True, ())
    regions = _merge_regions(base_lines, ours_lines, theirs_lines)
    # diff3 shows the base of each conflict, which refinement cannot keep exact (git, too, drops
    # to its EAGER level for diff3 output).
    if style == "merge" and any(r.kind == "conflict" for r in regions):
        regions = _refine_conflicts(regions, base_lines, ours_lines, theirs_lines)
        regions = _simplify_non_conflicts(regions, ours_lines)
    return _render(
        regions,
        base_lines,
        ours_lines,
        theirs_lines,
        ours_label=ours_label,
        theirs_label=theirs_label,
        base_label=base_label if style == "diff3" else None,
    )


# ---------------------------------------------------------------------- alignment


def _merge_regions(
    base: Sequence[str], ours: Sequence[str], theirs: Sequence[str]
) -> list[_Region]:
    """merge3's regions, with every region carrying its range in all three texts."""
    m = merge3.Merge3(base, ours, theirs, sequence_matcher=_MATCHER)
    regions: list[_Region] = []
    iz = ia = ib = 0
    for zmatch, zend, amatch, aend, bmatch, bend in m.find_sync_regions():
        if amatch > ia or bmatch > ib or zmatch > iz:
            a_part = ours[ia:amatch]
            b_part = theirs[ib:bmatch]
            z_part = base[iz:zmatch]
            kind: _Kind
            if a_part == b_part:
                kind = "same"
            elif a_part == z_part:
                kind = "theirs"
            elif b_part == z_part:
                kind = "ours"
            else:
                kind = "conflict"
            regions.append(_Region(kind, iz, zmatch, ia, amatch, ib, bmatch))
        if zend > zmatch:
            regions.append(_Region("unchanged", zmatch, zend, amatch, aend, bmatch, bend))
        iz, ia, ib = zend, aend, bend
    return regions


def _refine_conflicts(
    regions: list[_Region], base: Sequence[str], ours: Sequence[str], theirs: Sequence[str]
) -> list[_Region]:
    """Split each conflict into the lines that really differ (both sides non-empty only)."""
    out: list[_Region] = []
    for r in regions:
        if r.kind != "conflict" or r.a1 == r.a2 or r.b1 == r.b2:
            out.append(r)
            continue
        a_part = ours[r.a1 : r.a2]
        blocks = PatienceSequenceMatcher(None, a_part, theirs[r.b1 : r.b2]).get_matching_blocks()
        # Where each ours line sits in the base, to give every sub-conflict a base range.
        to_base = PatienceSequenceMatcher(None, base[r.z1 : r.z2], a_part).get_matching_blocks()
        ia = ib = 0
        zlo = r.z1
        for ja, jb, n in blocks:
            if ja > ia or jb > ib:
                z1 = max(zlo, r.z1 + _base_lo(to_base, ia))
                z2 = max(z1, r.z1 + _base_hi(to_base, ja, r.z2 - r.z1))
                out.append(_Region("conflict", z1, z2, r.a1 + ia, r.a1 + ja, r.b1 + ib, r.b1 + jb))
                zlo = z2
            if n:
                z1 = max(zlo, r.z1 + _base_lo(to_base, ja))
                z2 = max(z1, r.z1 + _base_hi(to_base, ja + n, r.z2 - r.z1))
                a_end, b_end = r.a1 + ja + n, r.b1 + jb + n
                out.append(_Region("same", z1, z2, r.a1 + ja, a_end, r.b1 + jb, b_end))
                zlo = z2
            ia, ib = ja + n, jb + n
    return out


def _base_lo(blocks: Sequence[tuple[int, int, int]], a_index: int) -> int:
    """The base line where ours line ``a_index`` starts, seen from the matches before it."""
    lo = 0
    for zi, ai, n in blocks:
        if ai + n <= a_index:
            lo = zi + n
        elif ai < a_index:
            return zi + (a_index - ai)
        else:
            break
    return lo


def _base_hi(blocks: Sequence[tuple[int, int, int]], a_index: int, z_len: int) -> int:
    """The base line where the ours text from ``a_index`` on resumes matching the base."""
    for zi, ai, n in blocks:
        if ai + n > a_index:
            return zi + max(0, a_index - ai) if n else z_len
    return z_len


def _simplify_non_conflicts(regions: list[_Region], ours: Sequence[str]) -> list[_Region]:
    """Join conflicts separated only by a few lines, or by lines with no letter or digit."""
    out: list[_Region] = []
    pending: list[_Region] = []  # the unchanged/same regions since the last conflict
    for r in regions:
        if r.kind in ("unchanged", "same"):
            pending.append(r)
            continue
        last = out[-1] if out else None
        if r.kind == "conflict" and last is not None and last.kind == "conflict" and pending:
            gap = ours[last.a2 : r.a1]
            if len(gap) <= 3 or not any(_ALNUM.search(line) for line in gap):
                out[-1] = _Region("conflict", last.z1, r.z2, last.a1, r.a2, last.b1, r.b2)
                pending = []
                continue
        out.extend(pending)
        pending = []
        out.append(r)
    out.extend(pending)
    return out


# ---------------------------------------------------------------------- output


def _render(
    regions: Sequence[_Region],
    base: Sequence[str],
    ours: Sequence[str],
    theirs: Sequence[str],
    *,
    ours_label: str,
    theirs_label: str,
    base_label: str | None,
) -> MergeResult:
    parts: list[str] = []
    conflicts: list[ConflictRegion] = []
    for r in regions:
        if r.kind == "unchanged":
            parts.extend(base[r.z1 : r.z2])
        elif r.kind in ("ours", "same"):
            parts.extend(ours[r.a1 : r.a2])
        elif r.kind == "theirs":
            parts.extend(theirs[r.b1 : r.b2])
        else:
            nl = "\r\n" if _needs_cr(ours, r.a1, theirs, r.b1, base) else "\n"
            parts.append(_marker("<", ours_label) + nl)
            parts.extend(_closed(ours[r.a1 : r.a2], nl))
            if base_label is not None:
                parts.append(_marker("|", base_label) + nl)
                parts.extend(_closed(base[r.z1 : r.z2], nl))
            parts.append("=" * MARKER_SIZE + nl)
            parts.extend(_closed(theirs[r.b1 : r.b2], nl))
            parts.append(_marker(">", theirs_label) + nl)
            conflicts.append(
                ConflictRegion(
                    base="".join(base[r.z1 : r.z2]),
                    theirs="".join(theirs[r.b1 : r.b2]),
                    ours="".join(ours[r.a1 : r.a2]),
                    base_start=r.z1,
                    base_end=r.z2,
                    theirs_start=r.b1,
                    theirs_end=r.b2,
                    start=r.a1,
                    end=r.a2,
                )
            )
    return MergeResult("".join(parts), not conflicts, tuple(conflicts))


def _marker(char: str, label: str) -> str:
    return char * MARKER_SIZE + (" " + label if label else "")


def _closed(lines: Sequence[str], nl: str) -> list[str]:
    """The lines, the last one given a newline if it has none (markers go on their own line)."""
    if lines and not lines[-1].endswith("\n"):
        return [*lines[:-1], lines[-1] + nl]
    return list(lines)


def _eol_crlf(lines: Sequence[str], i: int) -> int:
    """1 if line i ends with CRLF, 0 if with LF, -1 if undecided (no such line or no newline)."""
    if i >= len(lines) or not lines[i].endswith("\n"):
        return -1
    return 1 if lines[i].endswith("\r\n") else 0


def _needs_cr(
    ours: Sequence[str], a1: int, theirs: Sequence[str], b1: int, base: Sequence[str]
) -> bool:
    # As xdiff: the line before the conflict on both sides, then the base's first line, decide.
    needs = _eol_crlf(ours, a1 - 1 if a1 else 0)
    if needs:
        needs = _eol_crlf(theirs, b1 - 1 if b1 else 0)
    if needs:
        needs = _eol_crlf(base, 0)
    return needs > 0
