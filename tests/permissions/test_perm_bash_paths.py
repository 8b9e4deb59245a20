"""Against real bash: every path a generated command line may open outside the workspace asks
under ``plan`` (issue 29 item 2).

For each generated line, bash itself expands the arguments (tildes, braces, globs, quotes) in a
scratch tree; a word names a file outside when it, what follows an ``=`` (each ``:`` part after
the first), or a short option's value (the tail after its letters; a lone ``/`` there is a
delimiter) resolves outside the workspace. Whenever one does, the policy must not allow the
line. The default suite runs a bounded number of lines; ``-m slow`` runs many more.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coder_es.permissions.policy import Policy
from coder_es.tools.bash import BashInput, BashTool

PIECES = [
    "~", "~+", "~-", "~root", "~+0", "-", "--", "-f", "-n", "--opt=", "a=", "=", ":", "..",
    "/", ".", "other", ".env", "src", "leak", "l*", "*", "?", "[l]", "{..,src}", "{a,b}",
    "{.,.}", "'..'", '"~+"', "'-'", "x", "\\~", "a.py", "{~,x}", "{l*,x}", "$'\\x2e.'",
    "$HOME", '"$PWD"', "${OLDPWD}",
]  # fmt: skip
COMMANDS = ["cat", "head -n1", "grep -r x", "ls", "wc -l", "tail", "cat --", "grep -e x --"]


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """base/ws (the workspace: src/a.py, leak -> ../other) beside base/other/.env."""
    base = tmp_path_factory.mktemp("tree").resolve()
    ws = base / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "a.py").write_text("x\n")
    (ws / "-").mkdir()
    (base / "other").mkdir()
    (base / "other" / ".env").write_text("SECRET=1\n")
    (ws / "leak").symlink_to(base / "other")
    return ws, base / "other"


def _bash_words(args: str, ws: Path, oldpwd: Path) -> list[str] | None:
    """The words bash makes of ``args`` in ``ws`` (None: bash rejects the line)."""
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", f"printf '%s\\0' {args}"],
        cwd=ws,
        env={"HOME": os.environ["HOME"], "OLDPWD": str(oldpwd), "PATH": os.environ["PATH"]},
        capture_output=True,
        timeout=10,
        check=False,
    )
    if done.returncode != 0:
        return None
    return [w for w in done.stdout.decode("utf-8", "surrogateescape").split("\0") if w]


def _opened(word: str) -> set[str]:
    """The paths a program may open for one word, whatever its options mean."""
    found = {word}
    equals = [i for i, c in enumerate(word) if c == "="]
    for i in equals:
        found.add(word[i + 1 :])
    if equals:
        found.update(word[equals[0] + 1 :].split(":"))
    if word.startswith("-") and not word.startswith("--"):
        i = 1
        while i < len(word) and word[i].isalnum():
            i += 1
            found.add(word[i:])
    # A lone "/" glued to an option or after "=" is taken as a delimiter (cut -d/, awk -F/).
    return {p for p in found if p and (p != "/" or p == word)}


def _outside(path: str, ws: Path) -> bool:
    real = os.path.realpath(os.path.join(ws, path))
    return real != str(ws) and not real.startswith(f"{ws}/")


_arg = st.lists(st.sampled_from(PIECES), min_size=1, max_size=5).map("".join)
_line = st.tuples(st.sampled_from(COMMANDS), st.lists(_arg, min_size=1, max_size=3))


def _check(command: str, args: list[str], tree: tuple[Path, Path]) -> None:
    ws, other = tree
    words = _bash_words(" ".join(args), ws, other)
    if words is None:
        return
    outside = sorted({p for w in words for p in _opened(w) if _outside(p, ws)})
    if not outside:
        return
    line = f"{command} {' '.join(args)}"
    ev = Policy.for_agent("plan").evaluate("bash", BashTool().subject(BashInput(line), ws))
    assert ev.action != "allow", (line, words, outside)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(line=_line)
def test_every_path_bash_would_open_outside_asks(
    line: tuple[str, list[str]], tree: tuple[Path, Path]
) -> None:
    _check(line[0], line[1], tree)


@pytest.mark.slow
@settings(
    max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(line=_line)
def test_every_path_bash_would_open_outside_asks_many(
    line: tuple[str, list[str]], tree: tuple[Path, Path]
) -> None:
    _check(line[0], line[1], tree)


def test_the_oracle_sees_the_reported_reads(tree: tuple[Path, Path]) -> None:
    ws, other = tree
    for args in ("~+/../other/.env", "-- -/../../other/.env", "{..,x}/other/.env", "l*/.env"):
        words = _bash_words(args, ws, other)
        assert words and any(_outside(p, ws) for w in words for p in _opened(w)), args
