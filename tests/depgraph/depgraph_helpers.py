"""Shared helpers for the dependency graph tests."""

from __future__ import annotations

from pathlib import Path

from projections.depgraph import DepGraph

PROJECTS = Path(__file__).resolve().parents[2] / "fixtures" / "projects"


def edges(graph: DepGraph) -> set[tuple[str, str]]:
    return {(e.source, e.target) for e in graph.edges()}


def unresolved(graph: DepGraph, path: str) -> list[str]:
    return [("." * i.level) + i.module for i in graph.unresolved(path)]
