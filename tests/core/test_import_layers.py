"""No import circles, no import from a higher layer (issue 36): the contracts of pyproject.toml's
``[tool.importlinter]`` (the layers of docs/DESIGN.md, "Layers"), checked by import-linter over
the real import graph of this checkout."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = ROOT / "pyproject.toml"


def _layers() -> list[str]:
    config = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]
    [contract] = [c for c in config["contracts"] if c["type"] == "layers"]
    return [name for layer in contract["layers"] for name in re.split(r"[|:]", layer)]


def test_the_import_contracts_hold() -> None:
    # In a process of its own: import-linter configures logging for the whole process
    # (``logging.config.dictConfig``, which disables every logger created before it, so a later
    # test's captured warnings would be lost) and puts the current directory on sys.path. It
    # reads the packages of this checkout and the configuration in the current directory.
    lint = (
        "import sys; from importlinter.cli import lint_imports; "
        f"sys.exit(lint_imports(config_filename={str(PYPROJECT)!r}, no_cache=True, no_logo=True))"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run(
        [sys.executable, "-c", lint], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_package_has_a_layer() -> None:
    """A new package or top-level module the layers do not name would escape the check."""
    named = {name.strip() for name in _layers()}
    found = {
        f"coder_es.{p.stem if p.suffix == '.py' else p.name}"
        for p in (ROOT / "coder_es").iterdir()
        if (p.suffix == ".py" and p.name != "__init__.py")
        or (p.is_dir() and (p / "__init__.py").exists())
    }
    assert found - named == set()
