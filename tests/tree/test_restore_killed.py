"""kill -9 during a restoration of many files: every file is whole (its old or its new content),
and the temporary files staged beside the targets are removed by the next start."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from backends import REPO

from coder_es.workspace.atomic import clean_scratch, scratch_dir

FILES = 1500

# Restores FILES files from their old content to their new one, over and over, until killed.
RESTORER = """
import sys
from pathlib import Path
from coder_es.store.blobs import MemoryBlobStore, digest_of
from coder_es.workspace.atomic import scratch_dir
from coder_es.workspace.restore import restore_files
from coder_es.workspace.sandbox import Sandbox
ws, files = Path(sys.argv[1]), int(sys.argv[2])
old = [b"old %d\\n" % i * 400 for i in range(files)]
new = [b"new %d\\n" % i * 400 for i in range(files)]
blobs = MemoryBlobStore()
blobs.put_many([(c, None) for c in old + new])
names = [f"d{i % 13}/e{i % 5}/f{i}.txt" for i in range(files)]
sides = [old, new]
print("restoring", flush=True)
n = 0
while True:
    a, b = sides[n % 2], sides[(n + 1) % 2]
    plan = [(p, digest_of(x), digest_of(y)) for p, x, y in zip(names, a, b)]
    done = restore_files(Sandbox(ws), plan, blobs, scratch=scratch_dir(ws))
    assert {r.outcome for r in done} == {"restored"}, done[:3]
    n += 1
"""


def _leftovers(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.endswith(".coder-es-tmp")]


def test_a_killed_restoration_leaves_whole_files_and_the_next_start_cleans_up(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    for i in range(FILES):
        p = ws / f"d{i % 13}/e{i % 5}/f{i}.txt"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"old %d\n" % i * 400)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    rng = random.Random(7)
    left_beside = 0
    # At least 6 kills, and more (up to 20) until one lands while files are staged: on a loaded
    # machine the first restoration's read phase can outlast a short delay.
    for kills in range(1, 21):
        child = subprocess.Popen(
            [sys.executable, "-c", RESTORER, str(ws), str(FILES)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert child.stdout is not None and child.stdout.readline().strip() == "restoring"
        time.sleep(rng.uniform(0.05, 1.5))
        child.send_signal(signal.SIGKILL)
        child.wait()
        # Every file is whole, whatever moment the kill hit.
        for i in range(FILES):
            data = (ws / f"d{i % 13}/e{i % 5}/f{i}.txt").read_bytes()
            assert data in (b"old %d\n" % i * 400, b"new %d\n" % i * 400), i
        left_beside += len(_leftovers(ws))
        # The next start (any restoration, any workspace opened) removes what the kill left,
        # and the killed run's record of it.
        clean_scratch(ws)
        assert _leftovers(ws) == []
        scratch = scratch_dir(ws)
        records = os.listdir(scratch) if scratch.is_dir() else []
        assert [n for n in records if n.endswith(".coder-es-batch")] == []
        # Put every file back to its old content for the next child.
        for i in range(FILES):
            (ws / f"d{i % 13}/e{i % 5}/f{i}.txt").write_bytes(b"old %d\n" % i * 400)
        if kills >= 6 and left_beside:
            break
    assert left_beside, "no kill landed while files were staged: the test proves nothing"
