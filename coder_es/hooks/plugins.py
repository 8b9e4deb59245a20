"""Python plugins: objects or modules published under the entry point group ``coder_es.plugins``.

A plugin runs in the same pipeline as hook commands (``pipeline``): it is configured like one,
``command = "plugin:NAME"`` (NAME: the entry point's name), in configuration order, and its
answer is read like a hook's JSON output and recorded the same way. Its methods, each optional::

    on_prompt(payload)      UserPromptSubmit        on_tool_call(payload)   PreToolUse
    on_update(payload)      PostToolUse, PostToolUseFailure
    on_permission(payload)  PermissionRequest       on_stop(payload)        Stop, SubagentStop
    on_session_start / on_session_end / on_compact / on_notification (payload)

take the payload a hook command gets on stdin (a dict) and return None (no effect) or the dict a
hook prints as JSON (``{"hookSpecificOutput": {"permissionDecision": "deny", ...}}``); raising
is a failure (``on_failure`` decides). A plugin has no sandbox: it is code the user installed
in coder-es's own environment, trusted as coder-es is.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from functools import lru_cache
from importlib.metadata import entry_points
from typing import Any

from coder_es.hooks.answer import Ran

GROUP = "coder_es.plugins"
METHODS: dict[str, str] = {
    "UserPromptSubmit": "on_prompt",
    "PreToolUse": "on_tool_call",
    "PostToolUse": "on_update",
    "PostToolUseFailure": "on_update",
    "PermissionRequest": "on_permission",
    "Stop": "on_stop",
    "SubagentStop": "on_stop",
    "SessionStart": "on_session_start",
    "SessionEnd": "on_session_end",
    "PreCompact": "on_compact",
    "Notification": "on_notification",
}


@lru_cache(maxsize=64)
def load_plugin(name: str) -> Any:
    """The object the entry point ``name`` of ``coder_es.plugins`` names (a class is
    instantiated once). Raises ``LookupError`` when no such plugin is installed."""
    for ep in entry_points(group=GROUP):
        if ep.name == name:
            obj = ep.load()
            return obj() if isinstance(obj, type) else obj
    msg = f"no plugin named {name!r} in the entry point group {GROUP}"
    raise LookupError(msg)


def installed() -> list[str]:
    return sorted({ep.name for ep in entry_points(group=GROUP)})


def run_plugin(name: str, event: str, payload: dict[str, Any]) -> Ran:
    """Call the plugin's method for ``event``; its answer as a hook's: exit 0 and the JSON it
    returned, or exit 1 and the error it raised."""
    started = time.monotonic()

    def took() -> int:
        return int((time.monotonic() - started) * 1000)

    try:
        plugin = load_plugin(name)
        method: Callable[[dict[str, Any]], Any] | None = getattr(plugin, METHODS[event], None)
        answer = None if method is None else method(dict(payload))
        text = "" if answer is None else json.dumps(answer, sort_keys=True)
    except Exception as e:
        return Ran(1, "", f"{type(e).__name__}: {e}", took())
    return Ran(0, text, "", took())
