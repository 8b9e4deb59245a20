"""Agreement with grimp, an independent Python import graph, on real installed packages."""

from __future__ import annotations

import importlib
from pathlib import Path

import grimp
import pytest

from projections.depgraph import DepGraph
from projections.depgraph.parse import python_imports, python_imports_full


def _module(package: str, path: str) -> str:
    stem = path.rsplit(".", 1)[0]
    if stem == "__init__" or stem.endswith("/__init__"):
        stem = stem[: -len("__init__")].rstrip("/")
    return package + ("." + stem.replace("/", ".") if stem else "")


def _package_dir(name: str) -> Path:
    module = importlib.import_module(name)
    assert module.__file__ is not None
    return Path(module.__file__).parent


@pytest.mark.parametrize("package", ["httpx", "eventsourcing", "hypothesis"])
def test_internal_import_edges_match_grimp(package: str) -> None:
    theirs_graph = grimp.build_graph(package, cache_dir=None)
    theirs = {
        (a, b)
        for a in theirs_graph.modules
        for b in theirs_graph.find_modules_directly_imported_by(a)
        if a != b  # grimp keeps a module importing itself; the file graph has no self-loops
    }
    graph = DepGraph.build(_package_dir(package))
    ours = {
        (_module(package, e.source), _module(package, e.target))
        for e in graph.edges()
        if graph.language(e.source) == "python" and not e.source.endswith(".pyi")
    }
    ours = {(a, b) for a, b in ours if a in theirs_graph.modules}
    found = len(ours & theirs) / len(theirs)
    assert len(theirs) > 50
    assert found >= 0.99, sorted(theirs - ours)[:10]
    assert ours - theirs == set()


@pytest.mark.parametrize("package", ["hypothesis", "httpx", "eventsourcing", "pip"])
def test_fast_import_scan_equals_a_full_parse(package: str) -> None:
    files = sorted(_package_dir(package).rglob("*.py"))
    assert files
    for path in files:
        data = path.read_bytes()
        assert python_imports(data) == python_imports_full(data), path


def test_fast_scan_is_not_fooled_by_strings_and_comments() -> None:
    data = b'''"""Module doc.
from fake import thing
import fake2
"""
import real  # import fake3
x = """
  from fake4 import y
"""; import real2
s = 'import fake5'
# from fake6 import z
def f():
    """doc with a quote \\""" inside
import fake7
"""
    from real3 import (
        a,  # ) not the end
        b,
    )
'''
    modules = [i.module for i in python_imports(data)]
    assert modules == ["real", "real2", "real3"]
    assert python_imports(data) == python_imports_full(data)
