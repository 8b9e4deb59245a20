"""Workspace-relative paths: ``/``-separated, no leading slash, no ``.`` or ``..`` parts."""

from __future__ import annotations

from projections.depgraph.errors import BadPathError


def normalize(path: str) -> str:
    """The canonical form of a relative path from a change event; raises on escapes."""
    raw = path.replace("\\", "/")
    if raw.startswith("/") or (len(raw) > 1 and raw[1] == ":"):
        raise BadPathError(path)
    joined = join("", raw)
    if joined is None or not joined:
        raise BadPathError(path)
    return joined


def dirname(path: str) -> str:
    cut = path.rfind("/")
    return path[:cut] if cut >= 0 else ""


def join(directory: str, relative: str) -> str | None:
    """``directory/relative`` with ``.``/``..`` folded; None if it climbs above the root."""
    parts = directory.split("/") if directory else []
    for part in relative.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                return None
            parts.pop()
        else:
            parts.append(part)
    return "/".join(parts)


def child(directory: str, name: str) -> str:
    return f"{directory}/{name}" if directory else name
