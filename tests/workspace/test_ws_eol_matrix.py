"""Line endings, final newlines, encodings and binary files through read / edit / write."""

from __future__ import annotations

from pathlib import Path

import pytest

from coder_es.workspace import Workspace

LINES = ["alpha", "beta", "gamma", "delta", "epsilon"]


def render(lines: list[str], eol: str, final_nl: bool) -> bytes:
    return (eol.join(lines) + (eol if final_nl else "")).encode()


@pytest.mark.parametrize("eol", ["\n", "\r\n"], ids=["lf", "crlf"])
@pytest.mark.parametrize("final_nl", [True, False], ids=["final-nl", "no-final-nl"])
@pytest.mark.parametrize("user_edit", [False, True], ids=["disk-unchanged", "user-edited"])
@pytest.mark.parametrize("op", ["edit", "write"])
def test_line_endings_and_final_newline_are_preserved(
    ws: Workspace, root: Path, eol: str, final_nl: bool, user_edit: bool, op: str
) -> None:
    path = root / "f.txt"
    path.write_bytes(render(LINES, eol, final_nl))
    ws.read("f.txt")
    expected = list(LINES)
    if user_edit:
        user = list(LINES)
        user[4] = "epsilon (user)"
        path.write_bytes(render(user, eol, final_nl))
        expected[4] = "epsilon (user)"
    # Agents write LF and do not know about the final newline.
    if op == "edit":
        result = ws.edit("f.txt", "alpha\nbeta", "ALPHA\nBETA\nnew line")
    else:
        result = ws.write("f.txt", "ALPHA\nBETA\nnew line\ngamma\ndelta\nepsilon\n")
    expected[0:2] = ["ALPHA", "BETA", "new line"]
    assert result.ok, result.message_for_agent
    assert result.outcome == ("merged" if user_edit else "direct")
    assert path.read_bytes() == render(expected, eol, final_nl)


def test_user_converting_to_crlf_while_the_agent_edits_is_not_a_conflict(
    ws: Workspace, root: Path
) -> None:
    path = root / "f.txt"
    path.write_bytes(render(LINES, "\n", True))
    ws.read("f.txt")
    path.write_bytes(render(LINES, "\r\n", True))
    result = ws.edit("f.txt", "gamma", "GAMMA")
    assert result.outcome == "merged"
    assert path.read_bytes() == render(["alpha", "beta", "GAMMA", "delta", "epsilon"], "\r\n", True)


def test_mixed_line_endings_are_kept_byte_for_byte(ws: Workspace, root: Path) -> None:
    path = root / "f.txt"
    path.write_bytes(b"a\r\nb\nc\r\nd\n")
    ws.read("f.txt")
    path.write_bytes(b"a\r\nb\nc\r\nd (user)\n")
    assert ws.edit("f.txt", "a", "A").ok
    assert path.read_bytes() == b"A\r\nb\nc\r\nd (user)\n"


def test_crlf_conflict_markers_use_crlf(ws: Workspace, root: Path) -> None:
    path = root / "f.txt"
    path.write_bytes(b"a\r\nb\r\nc\r\n")
    ws.read("f.txt")
    path.write_bytes(b"a\r\nuser\r\nc\r\n")
    result = ws.edit("f.txt", "b", "agent", policy="markers")
    assert result.outcome == "conflict_markers"
    assert path.read_bytes() == (
        b"a\r\n<<<<<<< agent\r\nagent\r\n=======\r\nuser\r\n>>>>>>> disk\r\nc\r\n"
    )


def test_markers_are_not_glued_to_a_last_line_without_newline(ws: Workspace, root: Path) -> None:
    path = root / "f.txt"
    path.write_bytes(b"a\nb\nc")
    ws.read("f.txt")
    path.write_bytes(b"a\nb\nuser")
    result = ws.edit("f.txt", "c", "agent", policy="markers")
    assert path.read_bytes() == b"a\nb\n<<<<<<< agent\nagent\n=======\nuser\n>>>>>>> disk\n"
    assert result.conflicts[0].ours == "agent" and result.conflicts[0].theirs == "user"


LATIN1 = "café\nnaïve\nend\n".encode("latin-1")
BINARY = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256))
UTF16 = "hello\nworld\n".encode("utf-16")


@pytest.mark.parametrize("data", [LATIN1, BINARY, UTF16], ids=["latin-1", "binary", "utf-16"])
def test_non_utf8_and_binary_files_are_never_text_merged(
    ws: Workspace, root: Path, data: bytes
) -> None:
    path = root / "f.bin"
    path.write_bytes(data)
    read = ws.read("f.bin")
    assert read.binary and read.data == data
    refused = ws.edit("f.bin", "x", "y")
    assert refused.outcome == "error" and "binary or not UTF-8" in refused.message_for_agent
    # Changed on both sides: a conflict, the user's bytes stay.
    user = data + b"user"
    path.write_bytes(user)
    conflict = ws.write("f.bin", data + b"agent")
    assert conflict.outcome == "conflict" and path.read_bytes() == user
    assert "cannot be merged" in conflict.message_for_agent
    # Unchanged disk: the agent's bytes are written as they are.
    ws.read("f.bin")
    direct = ws.write("f.bin", data + b"agent")
    assert direct.outcome == "direct" and path.read_bytes() == data + b"agent"


def test_utf8_bom_survives_an_edit(ws: Workspace, root: Path) -> None:
    path = root / "f.txt"
    path.write_bytes(b"\xef\xbb\xbfa\nb\n")
    ws.read("f.txt")
    assert ws.edit("f.txt", "b", "B").ok
    assert path.read_bytes() == b"\xef\xbb\xbfa\nB\n"
