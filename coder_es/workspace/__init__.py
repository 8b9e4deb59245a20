"""The agent's window onto the project directory: path sandbox, snapshots, change detection,
atomic compare-and-swap writes and the three-way merge that keeps a user's concurrent edits.

The names below are imported from their modules on first use, so that importing one module of
the package (``coder_es.workspace.atomic``) does not import all of them (start-up time)."""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from coder_es.workspace.contents import ContentMerge, merge_contents
    from coder_es.workspace.errors import (
        InvalidPathError,
        PathOutsideWorkspaceError,
        ProtectedPathError,
        WorkspaceError,
        WriteConflictError,
    )
    from coder_es.workspace.ignore import IgnoreMatcher
    from coder_es.workspace.matching import MatchError
    from coder_es.workspace.merge import ConflictRegion, MergeResult, three_way_merge
    from coder_es.workspace.merge_write import ConflictPolicy
    from coder_es.workspace.sandbox import ResolvedPath, Sandbox
    from coder_es.workspace.stat_index import FileChange, StatIndex
    from coder_es.workspace.workspace import (
        EditResult,
        EventSink,
        Outcome,
        ReadResult,
        Workspace,
        unified_diff,
    )

_MODULES = {
    "ConflictPolicy": "coder_es.workspace.merge_write",
    "ConflictRegion": "coder_es.workspace.merge",
    "ContentMerge": "coder_es.workspace.contents",
    "EditResult": "coder_es.workspace.workspace",
    "EventSink": "coder_es.workspace.workspace",
    "FileChange": "coder_es.workspace.stat_index",
    "IgnoreMatcher": "coder_es.workspace.ignore",
    "InvalidPathError": "coder_es.workspace.errors",
    "MatchError": "coder_es.workspace.matching",
    "MergeResult": "coder_es.workspace.merge",
    "Outcome": "coder_es.workspace.workspace",
    "PathOutsideWorkspaceError": "coder_es.workspace.errors",
    "ProtectedPathError": "coder_es.workspace.errors",
    "ReadResult": "coder_es.workspace.workspace",
    "ResolvedPath": "coder_es.workspace.sandbox",
    "Sandbox": "coder_es.workspace.sandbox",
    "StatIndex": "coder_es.workspace.stat_index",
    "Workspace": "coder_es.workspace.workspace",
    "WorkspaceError": "coder_es.workspace.errors",
    "WriteConflictError": "coder_es.workspace.errors",
    "merge_contents": "coder_es.workspace.contents",
    "three_way_merge": "coder_es.workspace.merge",
    "unified_diff": "coder_es.workspace.workspace",
}


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "ConflictPolicy",
    "ConflictRegion",
    "ContentMerge",
    "EditResult",
    "EventSink",
    "FileChange",
    "IgnoreMatcher",
    "InvalidPathError",
    "MatchError",
    "MergeResult",
    "Outcome",
    "PathOutsideWorkspaceError",
    "ProtectedPathError",
    "ReadResult",
    "ResolvedPath",
    "Sandbox",
    "StatIndex",
    "Workspace",
    "WorkspaceError",
    "WriteConflictError",
    "merge_contents",
    "three_way_merge",
    "unified_diff",
]
