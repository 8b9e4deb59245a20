"""What kind of content a file holds, and keeping its line endings when the agent rewrites it.

Only UTF-8 text without NUL bytes is ever merged line by line. Anything else (binary files,
Latin-1 or UTF-16 sources) is compared as bytes only: merging it by lines could corrupt it.
"""

from __future__ import annotations

from typing import Literal

Eol = Literal["lf", "crlf", "mixed", "none"]

# git's heuristic: a NUL byte in the first 8000 bytes makes a file binary.
_BINARY_PROBE = 8000


def decode_text(data: bytes) -> str | None:
    """The text of ``data`` if it is UTF-8 text (a BOM is kept as U+FEFF), else None."""
    if b"\0" in data[:_BINARY_PROBE]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def eol_style(text: str) -> Eol:
    crlf = text.count("\r\n")
    lf = text.count("\n") - crlf
    if crlf and lf:
        return "mixed"
    if crlf:
        return "crlf"
    if lf:
        return "lf"
    return "none"


def to_lf(text: str) -> str:
    return text.replace("\r\n", "\n")


def with_eol(text: str, eol: Eol) -> str:
    """``text`` (pure LF) converted to ``eol``; mixed or unknown styles leave it as it is."""
    if eol == "crlf":
        return to_lf(text).replace("\n", "\r\n")
    return text


def adopt_style(new: str, like: str) -> str:
    """The agent's ``new`` text written with the line endings and final-newline state of ``like``.

    Agents produce LF text whatever the file uses; a CRLF file must stay CRLF. A file without a
    final newline keeps lacking it (the agent cannot see that from a read), and one with it keeps
    it.
    Mixed files are left exactly as the agent wrote them: there is no single style to adopt.
    """
    style = eol_style(like)
    new_style = eol_style(new)
    if style == "crlf" and new_style == "lf":
        new = with_eol(new, "crlf")
    elif style == "lf" and new_style == "crlf":
        new = to_lf(new)
    if like and new and style != "mixed":
        nl = "\r\n" if style == "crlf" else "\n"
        if like.endswith("\n") and not new.endswith("\n"):
            new += nl
        elif not like.endswith("\n") and new.endswith("\n"):
            new = new[: -len(nl)] if new.endswith(nl) else new[:-1]
    return new


def split_lines(text: str) -> list[str]:
    """Lines with their ``\\n`` kept; the last one may lack it. ``\\r`` stays part of a line."""
    if not text:
        return []
    lines = text.split("\n")
    last = lines.pop()
    out = [line + "\n" for line in lines]
    if last:
        out.append(last)
    return out


# Here rather than beside the workspace's machinery (merges, restores): `coder-es diff` shows
# patches without importing it (start-up time).
def unified_diff(
    before: bytes | None, after: bytes | None, path: str, *, max_lines: int | None = None
) -> str:
    """A unified diff between two contents (empty if equal; a note if either is binary)."""
    if before == after:
        return ""
    import difflib  # only when contents differ

    a = decode_text(before) if before is not None else ""
    b = decode_text(after) if after is not None else ""
    if a is None or b is None:
        return f"Binary file {path} changed\n"
    lines = list(
        difflib.unified_diff(
            split_lines(a),
            split_lines(b),
            f"a/{path}" if before is not None else "/dev/null",
            f"b/{path}" if after is not None else "/dev/null",
        )
    )
    lines = [x if x.endswith("\n") else x + "\n\\ No newline at end of file\n" for x in lines]
    if max_lines is not None and len(lines) > max_lines:
        lines = [*lines[:max_lines], f"... ({len(lines) - max_lines} more diff lines)\n"]
    return "".join(lines)
