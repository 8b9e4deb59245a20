"""The readable transcript behind the Markdown and HTML exports.

``build_transcript`` turns a prepared export into plain values: a header, the conversation tree
(nodes with parents, the head, labels) and one entry per event with its text and the diffs of the
files it changed. File contents come from the blob store; a file under a ``--redact-glob`` is shown
as its redaction marker, a blob that is gone as a note saying so.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from typing import Any

from coder_es.audit.export_redaction import GlobRedaction
from coder_es.audit.filters import NODE_KINDS, branch_path, head_node, node_labels
from coder_es.audit.prepared import PreparedExport, tool_versions
from coder_es.audit.records import AuditEvent
from coder_es.domain.refs import labels_by_node
from coder_es.errors import CoderESError
from coder_es.redaction import marker
from coder_es.store.blobs import BlobStore

MAX_OUTPUT_CHARS = 20_000
MAX_DIFF_LINES = 2_000
NODE_ROLES = {
    "UserMessageAdded": "user",
    "ModelResponded": "assistant",
    "ToolCallCompleted": "tool_result",
    "ContextCompacted": "summary",
}


@dataclass(frozen=True)
class FileDiff:
    path: str
    caption: str
    text: str
    """A unified diff, or a note (binary, redacted, missing, unchanged)."""


@dataclass(frozen=True)
class Entry:
    version: int
    kind: str
    timestamp: str
    node: bool
    title: str
    body: str
    diffs: tuple[FileDiff, ...] = ()
    redacted: tuple[str, ...] = ()
    tool_use_id: str | None = None


@dataclass(frozen=True)
class TreeNode:
    id: str
    parent: str | None
    role: str
    label: str
    labels: tuple[str, ...]
    on_head_path: bool


@dataclass(frozen=True)
class Transcript:
    session: str
    header: dict[str, Any]
    tree: tuple[TreeNode, ...]
    head: str | None
    entries: tuple[Entry, ...]
    children: tuple[ChildTranscript, ...] = ()

    def placement(self) -> tuple[dict[int, list[ChildTranscript]], list[ChildTranscript]]:
        """Where each subagent is shown: under the entry of its ``task`` call's result (else of
        its ``TaskStarted``, should filters leave the result out), or after the transcript."""
        by_call: dict[str, int] = {}
        for e in self.entries:
            if e.tool_use_id is None or e.kind not in ("ToolCallCompleted", "TaskStarted"):
                continue
            if e.kind == "ToolCallCompleted" or e.tool_use_id not in by_call:
                by_call[e.tool_use_id] = e.version
        under: dict[int, list[ChildTranscript]] = {}
        after: list[ChildTranscript] = []
        for child in self.children:
            version = by_call.get(child.tool_use_id)
            if version is None:
                after.append(child)
            else:
                under.setdefault(version, []).append(child)
        return under, after


@dataclass(frozen=True)
class ChildTranscript:
    """A subagent's transcript, with the ``task`` call that started it."""

    session: str
    tool_use_id: str
    agent: str
    description: str
    transcript: Transcript | None
    missing: str | None = None

    @property
    def title(self) -> str:
        return f"subagent {self.agent} (task {self.tool_use_id}): session {self.session}"


def _one_line(text: str, width: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _text_of_blocks(blocks: Any) -> str:
    parts = []
    for block in blocks or []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        elif block.get("type") == "tool_use":
            args = json.dumps(block.get("input"), indent=2, sort_keys=True, ensure_ascii=False)
            parts.append(f"→ tool call {block.get('name')} ({block.get('id')}):\n{args}")
        elif block.get("type") == "image":
            parts.append(image_placeholder(block))
        else:
            parts.append(f"[{block.get('type')} block]")
    return "\n\n".join(parts)


def image_placeholder(block: dict[str, Any]) -> str:
    """An image of a user message in a text export: what it is and the blob that holds it."""
    kind, size, blob = block.get("media_type"), block.get("size"), block.get("blob")
    return f"[image {kind}, {size} bytes, blob sha256:{blob}]"


class _Files:
    def __init__(self, blobs: BlobStore, globs: GlobRedaction) -> None:
        self.blobs = blobs
        self.globs = globs

    def content(self, path: str, digest: Any) -> tuple[list[str] | None, str | None]:
        """(lines, None) or (None, note)."""
        if digest is None:
            return [], None
        glob = self.globs.match(path)
        if glob:
            return None, marker("glob", glob)
        try:
            data = self.blobs.stored_form(str(digest))
        except CoderESError as e:
            return None, f"[content unavailable: {e}]"
        try:
            return data.decode("utf-8").splitlines(keepends=True), None
        except UnicodeDecodeError:
            return None, f"[binary content, {len(data)} bytes, sha256 {str(digest)[:16]}]"

    def diff(self, path: str, caption: str, before: Any, after: Any) -> FileDiff:
        if before == after:
            return FileDiff(path, caption, "(unchanged)")
        a, a_note = self.content(path, before)
        b, b_note = self.content(path, after)
        if a is None or b is None:
            note = a_note or b_note or ""
            return FileDiff(path, caption, note)
        lines = list(
            difflib.unified_diff(
                a,
                b,
                fromfile=f"a/{path}" if before is not None else "/dev/null",
                tofile=f"b/{path}" if after is not None else "/dev/null",
            )
        )
        if len(lines) > MAX_DIFF_LINES:
            more = len(lines) - MAX_DIFF_LINES
            lines = [*lines[:MAX_DIFF_LINES], f"... {more} more diff lines\n"]
        text = "".join(
            line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
            for line in lines
        )
        return FileDiff(path, caption, text.rstrip("\n"))


def _clip(text: str) -> str:
    if len(text) <= MAX_OUTPUT_CHARS:
        return text
    return text[:MAX_OUTPUT_CHARS] + (
        f"\n… {len(text) - MAX_OUTPUT_CHARS} more characters (complete in the JSONL export)"
    )


def _entry(e: AuditEvent, files: _Files) -> Entry:
    f = e.fields
    kind = e.kind
    diffs: list[FileDiff] = []
    if kind == "Started":
        title = f"session started in {f.get('workspace')}"
        body = "\n".join(
            f"{k}: {f.get(k)}"
            for k in ("title", "agent", "provider", "model", "parent_session", "parent_node")
            if f.get(k)
        )
    elif kind == "UserMessageAdded":
        body = _text_of_blocks(f.get("content"))
        title = f"user: {_one_line(body)}"
    elif kind == "ModelResponded":
        body = _text_of_blocks(f.get("blocks"))
        usage = f.get("usage") or {}
        title = f"assistant ({f.get('model')}, {f.get('stop_reason')})"
        if usage:
            body += "\n\nusage: " + ", ".join(f"{k}={v}" for k, v in sorted(usage.items()))
    elif kind == "ToolCallRequested":
        title = f"tool call {f.get('name')} ({f.get('tool_use_id')})"
        body = json.dumps(f.get("input"), indent=2, sort_keys=True, ensure_ascii=False)
    elif kind == "PermissionRequested":
        title = f"permission asked: {f.get('tool')} {_one_line(str(f.get('subject')))}"
        body = f"matched rule: {f.get('matched_rule')}"
    elif kind == "PermissionDecided":
        title = (
            f"permission {'ALLOWED' if f.get('decision') == 'allow' else 'DENIED'}: "
            f"{f.get('tool')} {_one_line(str(f.get('subject')))}"
        )
        body = "\n".join(
            f"{k}: {f.get(k)}"
            for k in ("decision", "scope", "pattern", "matched_rule", "decided_by", "reason")
            if f.get(k) is not None
        )
    elif kind == "ToolCallCompleted":
        title = (
            f"tool result {f.get('name')}{' ERROR' if f.get('is_error') else ''} "
            f"({f.get('duration_ms')} ms)"
        )
        body = _clip(str(f.get("output", "")))
        if f.get("output_blob"):
            body += f"\n[full output in blob {f.get('output_blob')}]"
        for change in f.get("files_changed") or []:
            if isinstance(change, dict):
                path = str(change.get("path"))
                by = f"changed by the hook {change['by']}" if change.get("by") else ""
                diffs.append(
                    files.diff(
                        path,
                        by or "changed by the tool",
                        change.get("before"),
                        change.get("after"),
                    )
                )
    elif kind == "EditApplied":
        path = str(f.get("path"))
        title = f"edit {path}: {f.get('outcome')}"
        body = f"outcome: {f.get('outcome')}, conflicts: {f.get('conflicts')}"
        diffs.append(
            files.diff(
                path, "the edit (what the agent saw → result)", f.get("base"), f.get("result")
            )
        )
        if f.get("disk") != f.get("base"):
            diffs.append(
                files.diff(path, "changed on disk meanwhile (merged)", f.get("base"), f.get("disk"))
            )
    elif kind == "WorkspaceRestored":
        title = f"workspace restored to node {f.get('node')}"
        body = ""
        for entry in f.get("entries") or []:
            if isinstance(entry, dict):
                path = str(entry.get("path"))
                diffs.append(
                    files.diff(
                        path,
                        f"restored ({entry.get('outcome')})",
                        entry.get("disk"),
                        entry.get("result"),
                    )
                )
    elif kind == "HookRan":
        effect = f.get("effect") or {}
        code = f.get("exit_code")
        shown = [
            k
            for k in ("decision", "blocked", "updated_input", "context", "feedback")
            if effect.get(k)
        ]
        what = ", ".join(
            f"{k} {effect[k]}"
            if k == "decision"
            else ("rewrote the input" if k == "updated_input" else k)
            for k in shown
        )
        title = (
            f"hook {f.get('hook_event')} {f.get('hook')}: "
            f"{'timed out' if code is None else f'exit {code}'}"
            f"{f' → {what}' if what else ''} ({f.get('duration_ms')} ms)"
        )
        lines = [f"sha256 of the command: {f.get('digest')}"]
        lines += [f"{k}: {v}" for k, v in sorted(effect.items()) if k != "files_changed"]
        if str(f.get("output") or "").strip():
            lines.append("stdout:\n" + _clip(str(f.get("output"))))
        if str(f.get("stderr") or "").strip():
            lines.append("stderr:\n" + _clip(str(f.get("stderr"))))
        body = "\n".join(lines)
        for change in effect.get("files_changed") or []:
            if isinstance(change, dict):
                diffs.append(
                    files.diff(
                        str(change.get("path")),
                        f"changed by the hook {f.get('hook')}",
                        change.get("before"),
                        change.get("after"),
                    )
                )
    elif kind == "ContextCompacted":
        title = f"context compacted ({f.get('produced_by')}), covers {len(f.get('covers') or [])}"
        body = str(f.get("summary", ""))
    else:
        title = kind
        body = "\n".join(f"{k}: {v}" for k, v in sorted(f.items()) if k != "prev_hash")
    return Entry(
        version=e.version,
        kind=kind,
        timestamp=e.timestamp,
        node=kind in NODE_KINDS,
        title=title,
        body=body,
        diffs=tuple(diffs),
        redacted=e.redacted,
        tool_use_id=str(f["tool_use_id"]) if isinstance(f.get("tool_use_id"), str) else None,
    )


def _tree(prepared: PreparedExport) -> tuple[tuple[TreeNode, ...], str | None]:
    events = prepared.all_events
    head = head_node(events)
    # Each label once, where it points at the end of the session (coder_es.domain.refs).
    labels = labels_by_node(node_labels(events))
    shown = {e.version: e for e in prepared.events}
    keep: set[str] | None = None
    if prepared.filters.get("branch"):
        keep = branch_path(events, str(prepared.filters["branch"]))
    head_path = branch_path(events, head) if head else set()
    nodes = []
    for e in events:
        if e.kind not in NODE_KINDS or (keep is not None and str(e.version) not in keep):
            continue
        shown_event = shown.get(e.version, e)
        entry_text = {
            "UserMessageAdded": lambda ev: _text_of_blocks(ev.fields.get("content")),
            "ModelResponded": lambda ev: _text_of_blocks(ev.fields.get("blocks")),
            "ToolCallCompleted": lambda ev: f"{ev.fields.get('name')}: {ev.fields.get('output')}",
            "ContextCompacted": lambda ev: str(ev.fields.get("summary")),
        }[e.kind](shown_event)
        parent = e.fields.get("parent")
        nodes.append(
            TreeNode(
                id=str(e.version),
                parent=str(parent) if parent is not None else None,
                role=NODE_ROLES[e.kind],
                label=_one_line(entry_text, 48),
                labels=tuple(labels.get(str(e.version), ())),
                on_head_path=str(e.version) in head_path,
            )
        )
    return tuple(nodes), head


def build_transcript(
    prepared: PreparedExport, blobs: BlobStore, globs: GlobRedaction
) -> Transcript:
    files = _Files(blobs, globs)
    started = prepared.started()
    header = {
        "session": prepared.session,
        "title": started.get("title") or "",
        "workspace": started.get("workspace"),
        "agent": started.get("agent"),
        "provider": started.get("provider"),
        "model": started.get("model"),
        "started": prepared.all_events[0].timestamp if prepared.all_events else "",
        "events": f"{len(prepared.events)} shown of {len(prepared.all_events)}",
        "head": f"version {prepared.head_version}, hash {prepared.head_hash}",
        "filters": prepared.filters,
        "redactions": prepared.redactions,
        "store_problems": prepared.store_problems,
        "tools": tool_versions(),
    }
    tree, head = _tree(prepared)
    entries = tuple(_entry(e, files) for e in prepared.events)
    children = tuple(
        ChildTranscript(
            session=c.session,
            tool_use_id=c.tool_use_id,
            agent=c.agent,
            description=c.description,
            transcript=None if c.prepared is None else build_transcript(c.prepared, blobs, globs),
            missing=c.missing,
        )
        for c in prepared.children
    )
    return Transcript(prepared.session, header, tree, head, entries, children)


def tree_rows(tree: tuple[TreeNode, ...]) -> list[tuple[TreeNode, int]]:
    """Nodes in depth-first order with their column: a node's first child stays in its
    parent's column (a linear conversation is a straight line), later children branch right."""
    ids = {n.id for n in tree}
    children: dict[str | None, list[TreeNode]] = {}
    for node in tree:
        parent = node.parent if node.parent in ids else None
        children.setdefault(parent, []).append(node)
    rows: list[tuple[TreeNode, int]] = []
    stack = [(n, 0) for n in reversed(children.get(None, []))]
    while stack:
        node, depth = stack.pop()
        rows.append((node, depth))
        kids = children.get(node.id, [])
        stack += [(c, depth + 1) for c in reversed(kids[1:])]
        if kids:
            stack.append((kids[0], depth))
    return rows
