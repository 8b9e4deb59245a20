"""Writes that always ask: git hooks and the repository's git config.

A hook (``.git/hooks/pre-commit``) or a ``core.hooksPath`` / ``core.fsmonitor`` line in
``.git/config`` (or ``.git/config.worktree``) runs code the next time the *user* runs git,
outside every rule the agent is under. So writing them asks a person even when a rule, an
"always allow" answer or the ``build`` preset would allow it. Only a deny (a rule or an
"always deny" answer) decides before this check, since it is stricter.

A shell line reaches them in every spelling the parser knows: redirections, ``tee``, ``dd
of=``, ``git config`` (any action but a read), ``git remote add`` and the other git commands
that write configuration or hooks, and any argument of a command that is not known to only
read (``cp``, ``mv``, ``ln``, ``install``, ``rsync``, ``sed -i``, ``cd .git``) that names them
(``changes_protected``).
"""

from __future__ import annotations

from coder_es.permissions.rules import glob_match

PROTECTED_RULE = "protected_path"
# The ``.git`` directory itself too: what is dropped into it (``cp config .git``, ``mv hooks
# .git``) becomes its configuration or its hooks.
ASK_BEFORE_WRITING = ("**/.git/hooks/**", "**/.git/config", "**/.git/config.worktree", "**/.git")
WRITING_TOOLS = ("write", "edit")


def always_asks(tool: str, kind: str, text: str) -> str | None:
    """Why this call must ask whatever the rules say, or None."""
    if tool not in WRITING_TOOLS or kind != "path":
        return None
    for pattern in ASK_BEFORE_WRITING:
        if glob_match(pattern, text.lstrip("/"), "path"):
            return f"{text} runs code the next time you use git: writing it always asks"
    return None


def changes_protected(text: str) -> bool:
    """Whether a path a shell command may change (``cp``'s or ``cd``'s argument, workspace
    relative) is git's configuration, its hooks or the ``.git`` directory holding them."""
    if ".git" not in text:
        return False
    return any(glob_match(p, text.lstrip("/"), "path") for p in ASK_BEFORE_WRITING)
