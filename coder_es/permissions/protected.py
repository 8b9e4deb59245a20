"""Writes that always ask: git hooks and the repository's git config.

A hook (``.git/hooks/pre-commit``) or a ``core.hooksPath`` / ``core.fsmonitor`` line in
``.git/config`` runs code the next time the *user* runs git, outside every rule the agent is
under. So writing them asks a person even when a rule, an "always allow" answer or the ``build``
preset would allow it. Only a deny (a rule or an "always deny" answer) decides before this
check, since it is stricter.
"""

from __future__ import annotations

from coder_es.permissions.rules import glob_match

PROTECTED_RULE = "protected_path"
ASK_BEFORE_WRITING = ("**/.git/hooks/**", "**/.git/config")
WRITING_TOOLS = ("write", "edit")


def always_asks(tool: str, kind: str, text: str) -> str | None:
    """Why this call must ask whatever the rules say, or None."""
    if tool not in WRITING_TOOLS or kind != "path":
        return None
    for pattern in ASK_BEFORE_WRITING:
        if glob_match(pattern, text.lstrip("/"), "path"):
            return f"{text} runs code the next time you use git: writing it always asks"
    return None
