"""The three-way merge: properties, agreement with git merge-file, and the real-history corpus."""

from __future__ import annotations

import gzip
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ws_helpers import git_merge_file

from coder_es.workspace.merge import three_way_merge
from coder_es.workspace.text import split_lines

CORPUS = (
    Path(__file__).resolve().parents[2].parent
    / "shared"
    / "merge-corpus"
    / "aider-history.jsonl.gz"
)

# Few distinct lines, so that the generated texts repeat lines and alignment is not trivial.
LINE = st.sampled_from(
    ["a\n", "b\n", "c\n", "}\n", "\n", "    return x\n", "def f():\n", "x = 1\n"]
)
TEXT = st.lists(LINE, max_size=25).map("".join)


@given(base=TEXT, ours=TEXT)
def test_unchanged_disk_gives_the_agents_version(base: str, ours: str) -> None:
    result = three_way_merge(base, base, ours)
    assert result.clean and result.text == ours


@given(base=TEXT, disk=TEXT)
def test_unchanged_agent_side_gives_the_disk(base: str, disk: str) -> None:
    result = three_way_merge(base, disk, base)
    assert result.clean and result.text == disk


@st.composite
def separated_edits(draw: st.DrawFn) -> tuple[list[str], int, int, list[str], list[str]]:
    """Unique base lines; two edits with at least one untouched line between them."""
    n = draw(st.integers(min_value=3, max_value=30))
    base = [f"line {i}\n" for i in range(n)]
    i = draw(st.integers(min_value=0, max_value=n - 3))
    j = draw(st.integers(min_value=i + 2, max_value=n - 1))
    user = draw(st.lists(st.sampled_from(["user edit\n", "user 2\n", ""]), min_size=1, max_size=3))
    agent = draw(
        st.lists(st.sampled_from(["agent edit\n", "agent 2\n", ""]), min_size=1, max_size=3)
    )
    return base, i, j, user, agent


@given(separated_edits(), st.booleans())
def test_non_overlapping_edits_from_both_sides_both_survive(
    case: tuple[list[str], int, int, list[str], list[str]], user_first: bool
) -> None:
    base, i, j, user, agent = case
    # The user replaces line i (or line j), the agent the other one.
    ui, ai = (i, j) if user_first else (j, i)
    disk = base[:ui] + [x for x in user if x] + base[ui + 1 :]
    ours = base[:ai] + [x for x in agent if x] + base[ai + 1 :]
    expected = list(base)
    lo, hi = sorted([(ui, [x for x in user if x]), (ai, [x for x in agent if x])])
    expected[hi[0] : hi[0] + 1] = hi[1]
    expected[lo[0] : lo[0] + 1] = lo[1]
    result = three_way_merge("".join(base), "".join(disk), "".join(ours))
    assert result.clean
    assert result.text == "".join(expected)


@given(base=TEXT, ours=TEXT, at=st.integers(min_value=0, max_value=30))
def test_users_unique_line_survives_every_clean_merge(base: str, ours: str, at: int) -> None:
    lines = split_lines(base)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    at = min(at, len(lines))
    unique = "USER ADDED THIS LINE 4f2a\n"
    disk = "".join([*lines[:at], unique, *lines[at:]])
    result = three_way_merge(base, disk, ours)
    if result.clean:
        assert unique in result.text
    else:
        # Every conflict keeps the user's side in the markers.
        assert unique in result.text
        assert result.conflicts


@given(base=TEXT, disk=TEXT, ours=TEXT)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_agrees_with_git_merge_file_on_clean_results(base: str, disk: str, ours: str) -> None:
    """Where both we and git merge cleanly the bytes are the same; conflict regions carry all
    three sides and the markers never glue onto a line."""
    result = three_way_merge(base, disk, ours, ours_label="ours", theirs_label="theirs")
    with tempfile.TemporaryDirectory() as tmp:
        git_clean, git_out = git_merge_file(Path(tmp), base.encode(), ours.encode(), disk.encode())
    if result.clean and git_clean:
        assert result.text.encode() == git_out
    for line in split_lines(result.text):
        if "<<<<<<<" in line or ">>>>>>>" in line or "=======" in line:
            assert line.startswith(("<<<<<<<", ">>>>>>>", "=======")), line


GIT_CASES = {
    "conflict, no final newline on either side": ("a\nb\nc", "a\nb\nX", "a\nb\nY"),
    "conflict, CRLF": ("a\r\nb\r\nc\r\n", "a\r\nb\r\nX\r\n", "a\r\nb\r\nY\r\n"),
    "identical change on both sides": ("a\nb\nc\nd\n", "a\nB\nc\nd\n", "a\nB\nc\nd\n"),
    "identical change, one side also changes more": (
        "a\nb\nc\nd\ne\n",
        "a\nB\nC\nd\ne\n",
        "a\nB\nc\nd\ne\n",
    ),
    "adjacent changes conflict": ("a\nb\nc\nd\n", "a\nB\nc\nd\n", "a\nb\nC\nd\n"),
    "changes one line apart merge": ("a\nb\nc\nd\n", "A\nb\nc\nd\n", "a\nb\nC\nd\n"),
    "zealous: common lines leave the conflict": (
        "1\n2\n3\n",
        "1\nsame\nmine\nsame2\n3\n",
        "1\nsame\ntheirs\nsame2\n3\n",
    ),
    "two conflicts three lines apart become one": (
        "1\n2\n3\n4\n5\n6\n7\n",
        "1\nX\n3\n4\n5\nY\n7\n",
        "1\nP\n3\n4\n5\nQ\n7\n",
    ),
    "two conflicts far apart stay two": (
        "1\n2\n3\n4\n5\n6\n7\n8\n9\n",
        "1\nX\n3\n4\n5\n6\n7\nY\n9\n",
        "1\nP\n3\n4\n5\n6\n7\nQ\n9\n",
    ),
    "conflicts separated by punctuation only join": (
        "a\n2\n}\n}\n)\n;\n7\n",
        "a\nX\n}\n}\n)\n;\nY\n",
        "a\nP\n}\n}\n)\n;\nQ\n",
    ),
    "insertions at the same place": ("a\nb\n", "a\nmine\nb\n", "a\ntheirs\nb\n"),
    "delete vs modify": ("a\nb\nc\n", "a\nc\n", "a\nB\nc\n"),
    "both append, base lacks final newline": ("a\nb", "a\nb\nmine", "a\nb\ntheirs\n"),
}


@pytest.mark.parametrize("case", list(GIT_CASES), ids=list(GIT_CASES))
def test_byte_identical_to_git_merge_file(case: str, tmp_path: Path) -> None:
    base, ours, theirs = GIT_CASES[case]
    result = three_way_merge(base, theirs, ours, ours_label="ours", theirs_label="theirs")
    git_clean, git_out = git_merge_file(tmp_path, base.encode(), ours.encode(), theirs.encode())
    assert result.clean == git_clean
    assert result.text.encode() == git_out


def test_conflict_regions_carry_all_three_sides() -> None:
    result = three_way_merge("a\nb\nc\n", "a\nTHEIRS\nc\n", "a\nOURS\nc\n")
    assert not result.clean
    (c,) = result.conflicts
    assert (c.base, c.theirs, c.ours) == ("b\n", "THEIRS\n", "OURS\n")
    assert (c.start, c.end, c.theirs_start, c.theirs_end, c.base_start, c.base_end) == (
        1,
        2,
        1,
        2,
        1,
        2,
    )
    assert result.text == "a\n<<<<<<< agent\nOURS\n=======\nTHEIRS\n>>>>>>> disk\nc\n"


def test_diff3_style_shows_the_base() -> None:
    result = three_way_merge("a\nb\nc\n", "a\nT\nc\n", "a\nO\nc\n", style="diff3")
    assert result.text == "a\n<<<<<<< agent\nO\n||||||| base\nb\n=======\nT\n>>>>>>> disk\nc\n"


def test_lines_split_on_newline_only() -> None:
    # A form feed or a lone CR is part of a line, as in git; str.splitlines would split there.
    text = "a\x0cb\rc\nmid\nend"
    assert split_lines(text) == ["a\x0cb\rc\n", "mid\n", "end"]
    result = three_way_merge(text, text.replace("end", "END"), "X" + text)
    assert result.clean and result.text == "Xa\x0cb\rc\nmid\nEND"


def test_corpus_agrees_with_git_merge_file() -> None:
    """Targets: >= 99.5% same clean/conflict status, 100% byte-identical where both clean."""
    if not CORPUS.exists():
        pytest.skip(f"the merge corpus is not at {CORPUS} (clone shared/ beside the repo)")
    with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    same_status = 0
    both_clean = 0
    identical = 0
    mismatched = []
    for row in rows:
        result = three_way_merge(row["base"], row["theirs"], row["ours"])
        same_status += result.clean == row["git_clean"]
        if result.clean and row["git_clean"]:
            both_clean += 1
            if result.text == row["git_result"]:
                identical += 1
            else:
                mismatched.append(f"{row['merge'][:10]} {row['path']}")
    assert len(rows) >= 600
    assert same_status / len(rows) >= 0.995, f"status agreement {same_status}/{len(rows)}"
    assert identical == both_clean, f"clean outputs differ: {mismatched[:10]}"
