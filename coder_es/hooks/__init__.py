"""Hooks and plugins: commands (Claude Code's hooks unchanged) and Python plugins that run on the
session's events in a deterministic, recorded, sandboxed pipeline (docs/DESIGN.md, "Hooks").

- ``spec``: what a configured hook is (event, matcher, command, timeout, failure mode, dialect);
- ``dialect``: Claude Code's tool and field names, both ways;
- ``answer``: a hook's exit code and output read as Claude Code reads them;
- ``command``: a hook command run as a transaction in the session's sandbox;
- ``plugins``: Python plugins from the ``coder_es.plugins`` entry point group;
- ``pipeline``: matching hooks in configuration order, rewrites chained, decisions combined;
- ``outside``: the same for a session without an agent loop of ours (a harness session).
"""

from coder_es.hooks.spec import EVENTS, TOOL_EVENTS, HookSpec

__all__ = ["EVENTS", "TOOL_EVENTS", "HookSpec"]
