"""Issue 36.4: every example of docs/api.md runs, as written, each in a fresh empty directory.

A block whose first line is ``# test_NAME.py`` is a pytest file: it is written out and run by
pytest (in a subprocess, with the project's replay plugin) and must pass.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "api.md"
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)


def examples() -> list[tuple[str, str]]:
    text = DOC.read_text()
    out = []
    for match in BLOCK.finditer(text):
        heading = re.findall(r"^## (.+)$", text[: match.start()], re.M)
        where = heading[-1] if heading else "intro"
        out.append((f"{len(out) + 1}: {where}", match.group(1)))
    return out


EXAMPLES = examples()


def test_the_document_has_examples_of_each_part() -> None:
    # The parts the issue names, each with a runnable example.
    code = "\n".join(body for _, body in EXAMPLES)
    for used in (
        "open_store",
        "store.start",
        "store.resume",
        "session.send",
        "session.answer",
        "store.fork",
        "store.checkout",
        "store.rewind",
        "store.label",
        "record_cassette",
        "replay_cassette",
        "def test_",
        "store.export",
        "store.verify",
        "store.search",
        "own_loop",
        "replay_own_loop",
    ):
        assert used in code, used


@pytest.mark.parametrize(("name", "code"), EXAMPLES, ids=[n for n, _ in EXAMPLES])
def test_example_runs(name: str, code: str, tmp_path: Path) -> None:
    first = code.splitlines()[0]
    if re.fullmatch(r"# test_\w+\.py", first):
        _run_pytest_file(first[2:], code, tmp_path)
        return
    script = tmp_path.parent / f"{tmp_path.name}-example.py"
    script.write_text(code)
    # A program of its own, as a reader runs it (the API's state is per process).
    env = {**os.environ, "PYTHONPATH": _pythonpath()}
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"{name}\n{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stderr


def _pythonpath() -> str:
    return os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)


def _run_pytest_file(name: str, code: str, tmp_path: Path) -> None:
    (tmp_path / name).write_text(code)
    env = {**os.environ, "PYTHONPATH": _pythonpath()}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", name],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert "1 passed" in done.stdout
