"""The workspace dependency graph (tree-sitter; Python, JavaScript, TypeScript/TSX, Go, Rust).

graph = DepGraph.build(root)                 # full scan, .gitignore honoured
graph.update({"pkg/a.py": b"...", "old.py": None})   # incremental, from file-change events
graph.dependencies("pkg/a.py", depth=2)      # also dependents(), topological_order()
graph.related_files(["pkg/a.py"], budget_tokens=1024)  # ranked repo map
graph.to_json()                              # {root, nodes, edges} for ``coder-es deps --json``
"""

from projections.depgraph.cache import CacheBacking, DirectoryBacking, ParseCache
from projections.depgraph.errors import BadPathError, DepGraphError, UnknownFileError
from projections.depgraph.graph import DepGraph
from projections.depgraph.languages import language_for
from projections.depgraph.model import (
    Definition,
    Edge,
    FileImports,
    FileTags,
    Import,
    RankedFile,
    Reached,
    Reference,
    RepoMap,
    UpdateResult,
)

__all__ = [
    "BadPathError",
    "CacheBacking",
    "Definition",
    "DepGraph",
    "DepGraphError",
    "DirectoryBacking",
    "Edge",
    "FileImports",
    "FileTags",
    "Import",
    "ParseCache",
    "RankedFile",
    "Reached",
    "Reference",
    "RepoMap",
    "UnknownFileError",
    "UpdateResult",
    "language_for",
]
