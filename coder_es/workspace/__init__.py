"""The agent's window onto the project directory: path sandbox, snapshots, change detection,
atomic compare-and-swap writes and the three-way merge that keeps a user's concurrent edits."""

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
from coder_es.workspace.sandbox import ResolvedPath, Sandbox
from coder_es.workspace.stat_index import FileChange, StatIndex
from coder_es.workspace.workspace import (
    ConflictPolicy,
    EditResult,
    EventSink,
    Outcome,
    ReadResult,
    Workspace,
    unified_diff,
)

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
