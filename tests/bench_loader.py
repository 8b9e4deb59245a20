"""Load a ``bench/`` script as a module without putting ``bench/`` on ``sys.path``.

A bench script named like a package (``bench/replay.py``, ``bench/mcp_overhead.py`` was once
``bench/mcp.py``) would shadow that package for every later import in the test run.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[1] / "bench"


def load_bench(name: str) -> ModuleType:
    module_name = f"bench_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module
