"""The content-hash parse cache and its persistent backing."""

from __future__ import annotations

from pathlib import Path

from depgraph_helpers import PROJECTS

from projections.depgraph import DepGraph, DirectoryBacking, ParseCache


def test_directory_backing_survives_a_new_process_and_repairs_damage(tmp_path: Path) -> None:
    first = ParseCache(DirectoryBacking(tmp_path / "cache"))
    expected = DepGraph.build(PROJECTS / "web", first).to_json()
    assert first.misses > 0
    entries = sorted((tmp_path / "cache").iterdir())
    assert entries

    second = ParseCache(DirectoryBacking(tmp_path / "cache"))  # a fresh session, same store
    assert DepGraph.build(PROJECTS / "web", second).to_json() == expected
    assert second.misses == 0 and second.hits >= first.misses

    entries[0].write_bytes(b"{not json")
    third = ParseCache(DirectoryBacking(tmp_path / "cache"))
    assert DepGraph.build(PROJECTS / "web", third).to_json() == expected
    assert third.misses == 1
    assert entries[0].read_bytes().startswith(b"{")  # rewritten


def test_identical_content_is_parsed_once() -> None:
    cache = ParseCache()
    same = b"import os\nfrom pkg import thing\n"
    DepGraph.from_sources({"a.py": same, "b/c.py": same, "d.py": b"x = 1\n"}, cache=cache)
    assert cache.misses == 2
