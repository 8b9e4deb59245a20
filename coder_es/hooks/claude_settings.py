"""Claude Code's ``hooks`` settings (``.claude/settings.json``, ``~/.claude/settings.json``) read
into our hook configuration, for ``coder-es hooks import``.

Claude Code's form::

    {"hooks": {"PreToolUse": [{"matcher": "Bash",
                               "hooks": [{"type": "command", "command": "...", "timeout": 30}]}]}}

Each command becomes one ``[[hooks.EVENT]]`` table with ``dialect = "claude-code"``, in the
file's order. Handlers of other types (``prompt``, ``agent``, ``http``) and events we do not
have are listed as skipped, never guessed at.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from coder_es.errors import UsageError
from coder_es.hooks.spec import EVENTS, HookSpec, check_matcher

MAX_SETTINGS_BYTES = 4 << 20


@dataclass(frozen=True)
class Imported:
    hooks: tuple[HookSpec, ...]
    skipped: tuple[str, ...]  # one line per handler not imported, saying why


def read_settings(path: Path) -> dict[str, object] | None:
    """The JSON object of a Claude Code settings file; None when it does not exist. A link, a
    special file or damaged JSON is refused with one line naming the file (the file comes with
    a repository: it is read, never followed)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise UsageError(f"{path}: cannot read: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{path}: not a regular file (a link or a special file is not read)")
    if st.st_size > MAX_SETTINGS_BYTES:
        raise UsageError(f"{path}: larger than {MAX_SETTINGS_BYTES} bytes; not a settings file")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        raw = f.read(MAX_SETTINGS_BYTES + 1)
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise UsageError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a JSON object")
    return data


def hooks_of(data: dict[str, object], source: str) -> Imported:
    hooks: list[HookSpec] = []
    skipped: list[str] = []
    table = data.get("hooks")
    if table is None:
        return Imported((), ())
    if not isinstance(table, dict):
        return Imported((), (f"{source}: 'hooks' is not an object",))
    for event, groups in table.items():
        if event not in EVENTS:
            skipped.append(f"{source}: {event}: an event coder-es does not have")
            continue
        if not isinstance(groups, list):
            skipped.append(f"{source}: {event}: expected a list of matcher groups")
            continue
        for group in groups:
            if not isinstance(group, dict):
                skipped.append(f"{source}: {event}: a matcher group that is not an object")
                continue
            matcher = group.get("matcher", "")
            if not isinstance(matcher, str) or check_matcher(matcher):
                skipped.append(f"{source}: {event}: matcher {matcher!r} is not valid")
                continue
            for handler in group.get("hooks") or []:
                if not isinstance(handler, dict):
                    continue
                kind = handler.get("type", "command")
                command = handler.get("command")
                if kind != "command" or not isinstance(command, str) or not command.strip():
                    skipped.append(f"{source}: {event}: a {kind!s} handler (only commands run)")
                    continue
                timeout = handler.get("timeout", 60)
                if isinstance(timeout, bool) or not isinstance(timeout, int | float):
                    timeout = 60
                hooks.append(
                    HookSpec(
                        event=event,
                        command=command,
                        matcher=matcher,
                        timeout=float(timeout) if timeout > 0 else 60.0,
                        dialect="claude-code",
                    )
                )
    return Imported(tuple(hooks), tuple(skipped))


def _toml_string(text: str) -> str:
    # A JSON string is a TOML basic string (the same escapes) once non-ASCII stays as is.
    return json.dumps(text, ensure_ascii=False)


def as_toml(hooks: tuple[HookSpec, ...], origin: str) -> str:
    """``[[hooks.EVENT]]`` tables for ``hooks`` (appended to a config file)."""
    out = [f"\n# Imported by `coder-es hooks import` from {origin}\n"]
    for h in hooks:
        out.append(f"\n[[hooks.{h.event}]]\n")
        if h.matcher:
            out.append(f"matcher = {_toml_string(h.matcher)}\n")
        out.append(f"command = {_toml_string(h.command)}\n")
        timeout = int(h.timeout) if h.timeout == int(h.timeout) else h.timeout
        out.append(f"timeout = {timeout}\n")
        out.append('dialect = "claude-code"\n')
    return "".join(out)
