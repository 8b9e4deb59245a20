"""Exports hold the whole tree of work: a session and the subagents its ``task`` calls started."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest

from coder_es.application import CoderApp
from coder_es.audit.export import ExportOptions, export_session
from coder_es.audit.filters import ExportFilter
from coder_es.audit.verify import verify_export, verify_session
from coder_es.cli.main import main
from coder_es.domain.session import Session
from coder_es.store.config import StoreConfig

HOSTILE = "<script>alert(1)</script>"


@dataclass
class Tree:
    app: CoderApp
    parent: str
    child: str


def _response(session: Session, blocks: list[dict[str, Any]], stop: str = "end_turn") -> str:
    return session.record_model_response(
        blocks=blocks,
        stop_reason=stop,
        usage={"input_tokens": 10, "output_tokens": 5},
        provider="anthropic",
        model="claude-x",
    )


def record_tree(app: CoderApp) -> Tree:
    """A parent whose model called ``task``; the child wrote a file under ``secrets/``."""
    task_input = {"description": "review calc", "prompt": f"check {HOSTILE}", "agent": "general"}
    parent = app.start_session(
        workspace="/w", title="parent", model="claude-x", provider="anthropic"
    )
    nodes: dict[str, str] = {}

    def ask(s: Session) -> None:
        nodes["user"] = s.add_user_message("review calc.py")
        call = {"type": "tool_use", "id": "t1", "name": "task", "input": task_input}
        reply = _response(s, [call], "tool_use")
        s.request_tool_call(node=reply, tool_use_id="t1", name="task", input=task_input)

    app.update(parent.id, ask)
    before = app.blobs.put(b"")
    after = app.blobs.put(b"CHILD-SECRET\n")
    child = app.start_session(
        workspace="/w",
        title="review calc",
        model="claude-x",
        provider="anthropic",
        parent_session=str(parent.id),
        parent_node=nodes["user"],
        settings={"task": {"tool_use_id": "t1", "agent": "general", "description": "review calc"}},
    )

    def work(s: Session) -> None:
        s.add_user_message(f"check {HOSTILE}")
        write = {"path": "secrets/k.txt", "content": "CHILD-SECRET\n"}
        reply = _response(s, [{"type": "tool_use", "id": "c1", "name": "write", "input": write}])
        s.request_tool_call(node=reply, tool_use_id="c1", name="write", input=write)
        s.complete_tool_call(
            tool_use_id="c1",
            name="write",
            output="wrote",
            files_changed=[{"path": "secrets/k.txt", "before": before, "after": after}],
        )
        _response(s, [{"type": "text", "text": f"child says {HOSTILE}"}])

    app.update(child.id, work)

    def finish(s: Session) -> None:
        s.start_task(
            tool_use_id="t1", child_session=str(child.id), agent="general", description="review"
        )
        s.complete_tool_call(tool_use_id="t1", name="task", output=f"child says {HOSTILE}")
        _response(s, [{"type": "text", "text": "the review is done"}])

    app.update(parent.id, finish)
    return Tree(app, str(parent.id), str(child.id))


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[Tree]:
    app = CoderApp(StoreConfig(backend="sqlite", path=tmp_path / "store"))
    try:
        yield record_tree(app)
    finally:
        app.close()


def _export(tree: Tree, fmt: str, **kw: Any) -> bytes:
    return export_session(tree.app, tree.parent, ExportOptions(format=fmt, **kw))


def _lines(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in data.splitlines()]


def test_jsonl_of_the_parent_holds_the_child_and_verifies(tree: Tree, tmp_path: Path) -> None:
    data = _export(tree, "jsonl")
    header, *events, trailer = _lines(data)
    assert header["format_version"] == 2 and header["complete"] is True
    (entry,) = header["children"]
    assert entry["session"] == tree.child and entry["parent_session"] == tree.parent
    assert (entry["tool_use_id"], entry["agent"], entry["complete"]) == ("t1", "general", True)
    sessions = [e["session"] for e in events]
    # The parent's events, then the child's: each line says whose it is.
    assert sessions == [tree.parent] * 7 + [tree.child] * 6
    link = next(e for e in events if e["kind"] == "TaskStarted")
    assert link["fields"]["child_session"] == tree.child
    assert entry["session_head"]["hash"] == events[-1]["hash"] == trailer["head_hash"]
    path = tmp_path / "tree.jsonl"
    path.write_bytes(data)
    report = verify_export(path)
    assert report.ok, report.problems
    assert (report.sessions, report.events) == (2, 13)
    assert f"1 subagent session(s) checked with session {tree.parent}" in report.notes


def _problems(tmp_path: Path, lines: list[dict[str, Any]]) -> list[str]:
    """Verify ``lines`` written back as an export whose trailer was recomputed (as a forger
    would): only the chain and tree checks stand between them and an OK."""
    import hashlib

    from coder_es.domain.chain import canonical_json

    *body, trailer = lines
    raw = ("\n".join(canonical_json(x) for x in body) + "\n").encode()
    trailer = {
        **trailer,
        "events": len(body) - 1,
        "head_hash": body[-1]["hash"],
        "sha256": hashlib.sha256(raw).hexdigest(),
    }
    path = tmp_path / "forged.jsonl"
    path.write_bytes(raw + (canonical_json(trailer) + "\n").encode())
    return [str(p) for p in verify_export(path).problems]


def test_a_child_dropped_or_unlinked_from_the_export_is_named(tree: Tree, tmp_path: Path) -> None:
    header, *events, trailer = _lines(_export(tree, "jsonl"))
    # The child's events and its header entry removed, the trailer made to match.
    parent_only = [e for e in events if e["session"] == tree.parent]
    without = {**header, "children": []}
    problems = _problems(tmp_path, [without, *parent_only, trailer])
    assert any(
        f"task t1 started session {tree.child}, which is not in the export" in p for p in problems
    )
    # The child's last event gone: its head is not the one its entry names.
    problems = _problems(tmp_path, [header, *events[:-1], trailer])
    assert any(f"session {tree.child} version 5: truncated" in p for p in problems)
    # A session slipped in as a child that no task of the parent started.
    unlinked = [e for e in events if e["kind"] != "TaskStarted"]
    problems = _problems(tmp_path, [header, *unlinked, trailer])
    assert any("no task of session" in p and tree.child in p for p in problems)


def test_a_child_gone_from_the_store_is_said_in_the_export_and_by_verify(
    tree: Tree, tmp_path: Path
) -> None:
    gone = str(uuid4())
    s = tree.app.start_session(workspace="/w", title="lost child")
    tree.app.update(
        s.id,
        lambda s: s.start_task(
            tool_use_id="t9", child_session=gone, agent="general", description="lost"
        ),
    )
    data = export_session(tree.app, s.id, ExportOptions(format="jsonl"))
    (entry,) = _lines(data)[0]["children"]
    assert entry["session"] == gone and entry["missing"] == "the session is not in the store"
    path = tmp_path / "lost.jsonl"
    path.write_bytes(data)
    problems = [str(p) for p in verify_export(path).problems]
    assert problems == [
        f"session {gone}: deleted: the subagent of task t9 (session {s.id}) is not in the "
        f"export: {entry['missing']}"
    ]


def test_html_nests_the_child_transcript_under_the_task_result_escaped(tree: Tree) -> None:
    html = _export(tree, "html").decode()
    result = html.index('id="v6"')  # the parent's task result
    nested = html.index(f'<details class="subagent" id="s{tree.child}">')
    end = html.index("</details>", nested)
    # Inside the result's section, before the parent's next entry.
    assert result < nested < end < html.index('id="v7"')
    assert "</section>" not in html[result:nested]
    child = html[nested:end]
    assert f"subagent general (task t1): session {tree.child}" in child
    assert "+CHILD-SECRET" in child  # the child's write, as a diff
    assert f'id="s{tree.child}-v6"' in child and f'href="#s{tree.child}-v2"' in child
    # Recorded text is text: the child's words cannot become markup.
    assert "<script" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in child
    assert html.count('id="v6"') == 1  # the child's entries do not take the parent's anchors


def test_markdown_quotes_the_child_under_the_task_result(tree: Tree) -> None:
    md = _export(tree, "md").decode()
    block = md[md.index("### 6. tool result task") : md.index("### 7. assistant")]
    quoted = [line for line in block.splitlines() if line.startswith(">")]
    assert quoted[0] == f"> **subagent general (task t1): session {tree.child}**: review"
    assert "> +CHILD-SECRET" in quoted and "> ### 6. assistant (claude-x, end\\_turn)" in quoted
    # Every line of the child's section is quoted: a fence in it cannot swallow the parent's.
    lines = block.splitlines()
    assert all(line.startswith(">") for line in lines[lines.index(quoted[0]) :] if line)


def test_otel_puts_the_child_in_the_parent_trace_under_the_task_span(tree: Tree) -> None:
    request = json.loads(_export(tree, "otel"))
    parent, child = request["resourceSpans"]
    spans = {s["name"]: s for s in parent["scopeSpans"][0]["spans"]}
    task = spans["execute_tool task"]
    child_spans = child["scopeSpans"][0]["spans"]
    attrs = {a["key"]: a["value"] for a in child["resource"]["attributes"]}
    assert attrs["coder_es.session.id"] == {"stringValue": tree.child}
    assert attrs["coder_es.session.parent_id"] == {"stringValue": tree.parent}
    assert {s["traceId"] for s in child_spans} == {task["traceId"]}
    (turn,) = [s for s in child_spans if s["name"].startswith("invoke_agent")]
    assert turn["parentSpanId"] == task["spanId"]
    assert {s["name"] for s in child_spans} >= {"chat claude-x", "execute_tool write"}


def test_redaction_and_filters_apply_to_the_child(tree: Tree, tmp_path: Path) -> None:
    for fmt in ("jsonl", "otel", "md", "html"):
        data = _export(tree, fmt, redact_globs=("secrets/*",)).decode()
        assert "CHILD-SECRET" not in data, fmt
    header, *events, _ = _lines(_export(tree, "jsonl", redact_globs=("secrets/*",)))
    (entry,) = header["children"]
    assert entry["redactions"][0]["versions"] == [3, 4, 5]  # the child's own versions
    kinds = ExportFilter(kinds=frozenset({"UserMessageAdded"}))
    header, *events, _ = _lines(_export(tree, "jsonl", filter=kinds))
    assert [(e["session"], e["version"]) for e in events] == [(tree.parent, 2), (tree.child, 2)]
    assert header["children"][0]["complete"] is False
    path = tmp_path / "users.jsonl"
    path.write_bytes(_export(tree, "jsonl", filter=kinds))
    assert verify_export(path).ok
    # Left out on request: the export says so, and is not complete.
    header, *events, _ = _lines(_export(tree, "jsonl", children=False))
    assert header["children"] == [] and header["filters"] == {"children": "excluded"}
    assert header["complete"] is False and {e["session"] for e in events} == {tree.parent}


def test_verifying_the_parent_in_the_store_verifies_the_child(tree: Tree) -> None:
    report = verify_session(tree.app, tree.parent)
    assert report.ok and (report.sessions, report.events) == (2, 13)
    assert {h.session for h in report.heads} == {tree.parent, tree.child}
    assert "1 subagent session(s) checked" in report.notes


def test_cli_export_of_the_parent_then_verify_of_the_file(
    tree: Tree, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree.app.close()
    store = ["--backend", "sqlite", "--store", str(tmp_path / "store")]
    out = tmp_path / "tree.jsonl"
    assert main([*store, "export", tree.parent[:8], "--format", "jsonl", "-o", str(out)]) == 0
    assert main([*store, "verify", str(out)]) == 0
    assert "OK (2 session(s), 13 event(s)" in capsys.readouterr().out
    assert main([*store, "export", tree.parent, "--format", "jsonl", "--no-children"]) == 0
    header = json.loads(capsys.readouterr().out.splitlines()[0])
    assert header["children"] == []
