"""No import circles, no import from a higher layer (issue 36): the contracts of pyproject.toml's
``[tool.importlinter]`` (the layers of docs/DESIGN.md, "Layers"), checked by import-linter over
the real import graph of this checkout."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = ROOT / "pyproject.toml"


def _layers() -> list[str]:
    config = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]
    [contract] = [c for c in config["contracts"] if c["type"] == "layers"]
    return [name for layer in contract["layers"] for name in re.split(r"[|:]", layer)]


def test_the_import_contracts_hold(capsys: pytest.CaptureFixture[str]) -> None:
    from importlinter.cli import lint_imports

    # import-linter reads the packages of this checkout (the tests run with it on sys.path)
    # and the configuration in the current directory.
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        code = lint_imports(config_filename=str(PYPROJECT), no_cache=True, no_logo=True)
    finally:
        os.chdir(cwd)
    out = capsys.readouterr().out
    assert code == 0, out


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
