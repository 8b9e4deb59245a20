"""A hook run: a command in the session's sandbox, or a plugin.

A hook command runs exactly as the session's ``bash`` calls do
(``tools.with_input.run_with_input``): a transaction in the same sandbox (read-only presets
read-only, the store out of reach), its changes merged into the workspace by the same merge, the
agent's view of each changed file updated, with the workspace as its working directory, its JSON
input on stdin and ``CLAUDE_PROJECT_DIR`` (and ``CODER_ES_PROJECT_DIR``) naming the workspace.
From a session's second hook on, the sandbox was set up ahead (``tools.with_input``).
"""

from __future__ import annotations

import json
import time

from coder_es.hooks.answer import Ran
from coder_es.hooks.plugins import run_plugin
from coder_es.hooks.spec import HookSpec
from coder_es.tools.base import ToolContext
from coder_es.tools.with_input import run_with_input


async def run_hook(spec: HookSpec, payload: dict[str, object], ctx: ToolContext) -> Ran:
    plugin = spec.plugin
    if plugin is not None:
        return run_plugin(plugin, spec.event, dict(payload))
    root = str(ctx.root)
    env = {"CLAUDE_PROJECT_DIR": root, "CODER_ES_PROJECT_DIR": root}
    data = json.dumps(payload, ensure_ascii=False).encode("utf-8", "surrogateescape")
    started = time.monotonic()
    done = await run_with_input(spec.command, data, max(1, int(spec.timeout * 1000)), ctx, env)
    took = int((time.monotonic() - started) * 1000)
    changes = tuple(c.to_dict() for c in done.files_changed)
    return Ran(done.returncode, done.stdout, done.stderr, took, changes, done.failure)
