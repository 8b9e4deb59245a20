"""What the recording says the disk held: initial files, and edits made by someone else.

Events that touch a file say what the disk held before (a read's ``FileObserved.hash``, a merge's
``EditApplied.disk``, a shell command's ``files_changed[].before``, a restoration's ``disk``) and
after (``EditApplied.result``, ``files_changed[].after``, the restoration's ``result``). Walking
them in order gives:

- the **initial state** of every file the session touched: the first "before" seen for its path;
- the **external edits**: a "before" that is not what the previous event left there means someone
  else (the user) changed the file in between. A live replay makes the same change to its scratch
  workspace right before the step that saw it, so a recorded merge of a user's edit replays as a
  merge again.

Only workspace-relative paths are modelled; absolute (outside) paths are never touched, and
neither are the names coder-es itself never writes (``.coder-es/``, ``.git/hooks/``,
``.git/config``: ``coder_es.workspace.confined``): a cassette never carries them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from coder_es.workspace.confined import refusal


class EventLike(Protocol):
    @property
    def version(self) -> int: ...

    @property
    def kind(self) -> str: ...

    @property
    def fields(self) -> dict[str, Any]: ...


_UNKNOWN = object()


@dataclass(frozen=True)
class FileTouch:
    path: str
    before: str | None
    after: str | None
    has_after: bool


def relative(path: Any) -> bool:
    """A workspace-relative name a replay may write (see the module docstring)."""
    if not isinstance(path, str) or not path or path.startswith("/") or "\0" in path:
        return False
    parts = path.split("/")
    return not any(p in ("", ".", "..") for p in parts) and refusal(path) is None


def touches(kind: str, fields: dict[str, Any]) -> Iterator[FileTouch]:
    """(path, disk before, disk after) for each file an event reports on."""
    if kind == "FileObserved":
        yield FileTouch(fields["path"], fields.get("hash"), fields.get("hash"), True)
    elif kind == "EditApplied":
        yield FileTouch(fields["path"], fields.get("disk"), fields.get("result"), True)
    elif kind == "ToolCallCompleted":
        for change in fields.get("files_changed") or []:
            if isinstance(change, dict) and "path" in change:
                yield FileTouch(change["path"], change.get("before"), change.get("after"), True)
    elif kind == "WorkspaceRestored":
        for entry in fields.get("entries") or []:
            if isinstance(entry, dict) and "path" in entry:
                yield FileTouch(entry["path"], entry.get("disk"), entry.get("result"), True)


def initial_states(events: Iterable[EventLike]) -> dict[str, str | None]:
    """path -> content hash at the start of the session (None: the file did not exist)."""
    initial: dict[str, str | None] = {}
    for event in events:
        for t in touches(event.kind, event.fields):
            if relative(t.path) and t.path not in initial:
                initial[t.path] = t.before
    return initial


def step_key(event: EventLike) -> str:
    """Which step an external edit must be made before: a tool call, or a restoration."""
    if event.kind == "WorkspaceRestored":
        return f"restore:{event.version}"
    return f"call:{event.fields.get('tool_use_id')}"


def external_edits(
    events: Iterable[EventLike], initial: dict[str, str | None]
) -> dict[str, list[tuple[str, str | None]]]:
    """step key -> [(path, content hash the disk held)] for edits made outside the session."""
    model: dict[str, Any] = dict(initial)
    edits: dict[str, list[tuple[str, str | None]]] = {}
    for event in events:
        for t in touches(event.kind, event.fields):
            if not relative(t.path):
                continue
            known = model.get(t.path, _UNKNOWN)
            if known is not _UNKNOWN and known != t.before:
                edits.setdefault(step_key(event), []).append((t.path, t.before))
            model[t.path] = t.after
    return edits


def effects(kind: str, fields: dict[str, Any]) -> list[tuple[str, str | None]]:
    """(path, content hash after) for what an event left on the disk (an observation leaves
    it as it was)."""
    if kind == "FileObserved":
        return []
    return [(t.path, t.after) for t in touches(kind, fields) if relative(t.path)]
