"""The command line compiles the code ``dataclasses`` generates once per user (issue 35).

Each check runs in a child process: the cache is installed by the command line's ``run`` into
``dataclasses`` for the life of its process, never into the test process.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import dataclasses, sys
from coder_es.cli import codecache
cache = codecache.install("probe")

@dataclasses.dataclass(frozen=True)
class Point:
    x: int
    y: int = 2

p = Point(1)
assert p == Point(1, 2) and p != Point(1, 3) and hash(p) == hash(Point(1, 2))
assert repr(p) == "Point(x=1, y=2)"
try:
    p.x = 5
except dataclasses.FrozenInstanceError:
    pass
else:
    raise AssertionError("not frozen")
from coder_es.domain.session import Session  # eventsourcing's frozen event dataclasses
print("COMPILED", cache.compiled, "HITS", cache.hits)
"""


def _probe(cache_home: Path) -> tuple[int, int]:
    env = {
        **os.environ,
        "XDG_CACHE_HOME": str(cache_home),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    words = done.stdout.split()
    return int(words[words.index("COMPILED") + 1]), int(words[words.index("HITS") + 1])


def _file(cache_home: Path) -> Path:
    (found,) = (cache_home / "coder-es" / "code").glob("probe.*.marshal")
    return found


def test_the_second_run_compiles_nothing_and_behaves_the_same(tmp_path: Path) -> None:
    compiled, hits = _probe(tmp_path)
    assert compiled > 100  # the Session events alone are ~35 classes
    assert stat.S_IMODE(_file(tmp_path).stat().st_mode) == 0o600
    assert _probe(tmp_path) == (0, compiled + hits)


def test_a_damaged_file_is_compiled_around_and_rewritten(tmp_path: Path) -> None:
    first = _probe(tmp_path)
    _file(tmp_path).write_bytes(b"\x00not marshal")
    assert _probe(tmp_path) == first
    assert _probe(tmp_path) == (0, sum(first))


def test_a_file_others_can_write_is_not_loaded(tmp_path: Path) -> None:
    first = _probe(tmp_path)
    path = _file(tmp_path)
    path.chmod(0o666)
    assert _probe(tmp_path) == first
    # Rewritten by this user, only this user's again.
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert _probe(tmp_path) == (0, sum(first))
