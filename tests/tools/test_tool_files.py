"""read / write / edit through the real workspace, and tool input schemas."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coder_es.tools.base import ToolCall, ToolContext
from coder_es.tools.files import MAX_READ_BYTES, EditInput, EditTool, ReadInput, ReadTool, WriteTool
from coder_es.tools.lines import line_window
from coder_es.tools.registry import LocalExecutor, default_registry
from coder_es.tools.schema import ToolInputError, json_schema, parse_input

Make = Callable[..., ToolContext]


def run(tool_name: str, args: dict, ctx: ToolContext):  # type: ignore[no-untyped-def]
    executor = LocalExecutor(default_registry())
    return asyncio.run(executor.execute(ToolCall(ctx.tool_use_id, tool_name, args), ctx))


def test_schemas_name_exactly_the_documented_inputs() -> None:
    defs = {d["name"]: d["input_schema"] for d in default_registry().definitions()}
    expected = {
        "bash": (["command"], ["command", "timeout_ms"]),
        "read": (["path"], ["path", "offset", "limit"]),
        "write": (["path", "content"], ["path", "content"]),
        "edit": (
            ["path", "old_string", "new_string"],
            ["path", "old_string", "new_string", "replace_all"],
        ),
        "grep": (["pattern"], ["pattern", "path", "ignore_case", "max_results"]),
        "find": (["pattern"], ["pattern", "path", "max_results"]),
        "task": (["description", "prompt"], ["description", "prompt", "agent"]),
    }
    assert set(defs) == set(expected)
    for name, (required, props) in expected.items():
        assert defs[name]["required"] == required, name
        assert list(defs[name]["properties"]) == props, name
        assert defs[name]["additionalProperties"] is False
    assert json_schema(ReadInput)["properties"]["offset"] == {
        "type": "integer",
        "description": "first line to show (1-based; default 1)",
        "minimum": 1,
    }


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({}, "missing required argument 'path'"),
        ({"path": 3}, "'path' must be a string, got int"),
        ({"path": "a", "offset": True}, "'offset' must be a integer, got bool"),
        ({"path": "a", "offset": 0}, "'offset' must be at least 1"),
        ({"path": "a", "colour": "red"}, "unknown argument(s) colour"),
        ([1, 2], "arguments must be a JSON object"),
    ],
)
def test_invalid_arguments_are_explained(raw: object, message: str) -> None:
    with pytest.raises(ToolInputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_input(ReadInput, raw)


def test_parse_fills_defaults_and_accepts_null_for_optional() -> None:
    assert (
        parse_input(EditInput, {"path": "a", "old_string": "x", "new_string": "y"}).replace_all
        is False
    )
    assert parse_input(ReadInput, {"path": "a", "limit": None}).limit is None


def test_read_shows_numbered_lines_and_records_the_snapshot(make_ctx: Make) -> None:
    ctx = make_ctx()
    result = run("read", {"path": "src/app.py"}, ctx)
    assert not result.is_error
    assert result.output == "1\tdef main():\n2\t    return 'hello'"
    kind, event = ctx.sink.events[-1]  # type: ignore[attr-defined]
    assert kind == "observe_file" and event["path"] == "src/app.py" and event["tool_use_id"] == "t1"


def test_read_offset_and_limit_page_through_a_file(make_ctx: Make, repo: Path) -> None:
    (repo / "long.txt").write_text("".join(f"line {i}\n" for i in range(1, 101)))
    out = run("read", {"path": "long.txt", "offset": 10, "limit": 3}, make_ctx()).output
    assert out.splitlines()[:3] == ["10\tline 10", "11\tline 11", "12\tline 12"]
    assert "88 more lines; read with offset=13" in out
    past = run("read", {"path": "long.txt", "offset": 500}, make_ctx())
    assert past.is_error and "past the end" in past.output


@pytest.mark.parametrize("brk", ["\r\n", "\r", "\f", "\x1c", "\x85", "\u2028"])
def test_read_numbers_lines_as_splitlines_whatever_breaks_them(
    make_ctx: Make, repo: Path, brk: str
) -> None:
    # Only a window of the file is split; a break other than \n falls back to splitting it all,
    # so the numbers and the count of lines left stay those of str.splitlines.
    body = "".join(f"a{i}\n" if i % 3 else f"b{i}{brk}" for i in range(1, 31))
    (repo / "breaks.txt").write_text(body, newline="")
    out = run("read", {"path": "breaks.txt", "offset": 4, "limit": 5}, make_ctx()).output
    lines = body.splitlines()
    want = [f"{n}\t{lines[n - 1]}" for n in range(4, 9)]
    assert out.splitlines()[:5] == want
    assert f"{len(lines) - 8} more lines; read with offset=9" in out


@given(
    st.text(alphabet="ab\n\r\f\x1c\x85\u2028é", max_size=40),
    st.integers(0, 12),
    st.integers(1, 12),
)
@settings(max_examples=300, deadline=None)
def test_line_window_is_a_slice_of_splitlines(text: str, start: int, count: int) -> None:
    lines = text.splitlines()
    assert line_window(text.encode(), text, start, count) == (
        lines[start : start + count],
        len(lines),
    )


def test_read_guards_binary_missing_directories_and_huge_files(make_ctx: Make, repo: Path) -> None:
    (repo / "img.bin").write_bytes(b"\x89PNG\0\0\x01")
    assert "binary" in run("read", {"path": "img.bin"}, make_ctx()).output
    missing = run("read", {"path": "nope.txt"}, make_ctx())
    assert missing.is_error and "does not exist" in missing.output
    folder = run("read", {"path": "src"}, make_ctx())
    assert folder.is_error and "directory" in folder.output
    (repo / "big.txt").write_bytes(b"x" * (MAX_READ_BYTES + 1))
    big = run("read", {"path": "big.txt"}, make_ctx())
    assert big.is_error and "read limit" in big.output


def test_read_outside_the_workspace_needs_permission(make_ctx: Make, tmp_path: Path) -> None:
    secret = tmp_path / "outside.txt"
    secret.write_text("private\n")
    refused = run("read", {"path": str(secret)}, make_ctx())
    assert refused.is_error and "outside the workspace" in refused.output
    allowed = run("read", {"path": str(secret)}, make_ctx(outside_ok=True))
    assert allowed.output == "1\tprivate"


def test_edit_requires_a_read_then_changes_the_file(make_ctx: Make, repo: Path) -> None:
    ctx = make_ctx()
    blind = run("edit", {"path": "src/util.py", "old_string": "1", "new_string": "2"}, ctx)
    assert blind.is_error and "read it first" in blind.output
    run("read", {"path": "src/util.py"}, ctx)
    done = run("edit", {"path": "src/util.py", "old_string": "1", "new_string": "2"}, ctx)
    assert not done.is_error and "+HELLO = 2" in done.output
    assert (repo / "src/util.py").read_text() == "HELLO = 2\n"
    assert [c.path for c in done.files_changed] == ["src/util.py"]


def test_edit_merges_with_a_concurrent_user_edit(make_ctx: Make, repo: Path) -> None:
    ctx = make_ctx()
    run("read", {"path": "src/app.py"}, ctx)
    # The user adds a line at the top while the agent works from what it read.
    (repo / "src/app.py").write_text("import os\ndef main():\n    return 'hello'\n")
    res = run("edit", {"path": "src/app.py", "old_string": "'hello'", "new_string": "'bye'"}, ctx)
    assert not res.is_error and "merged" in res.output
    assert (repo / "src/app.py").read_text() == "import os\ndef main():\n    return 'bye'\n"


def test_write_creates_files_and_refuses_unread_overwrites(make_ctx: Make, repo: Path) -> None:
    ctx = make_ctx()
    created = run("write", {"path": "docs/new.md", "content": "new\n"}, ctx)
    assert not created.is_error and (repo / "docs/new.md").read_text() == "new\n"
    clobber = run("write", {"path": "README.md", "content": "gone\n"}, ctx)
    assert clobber.is_error and (repo / "README.md").read_text() == "# Demo\nhello world\n"


def test_invalid_arguments_and_unknown_tools_become_error_results(make_ctx: Make) -> None:
    assert "Invalid arguments for read" in run("read", {"file": "x"}, make_ctx()).output
    assert run("frobnicate", {}, make_ctx()).is_error
    assert ReadTool.read_only and not WriteTool.read_only and not EditTool.read_only
