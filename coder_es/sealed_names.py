"""File names are data: a name that matches a redaction rule is sealed in the log, and resolved
back to the real name wherever it becomes an effect.

A file called ``ghp_<36 characters>.txt`` is, to the redactor, a GitHub token: every event naming
it stores ``[REDACTED:pattern:github_token:<id>].txt`` and seals the real name with the session's
other secrets (``coder_es.sealing``). What is recorded stays that way (exports, cassettes and
telemetry never see the name). What touches the disk (rewind, checkout) must use the real name:
restoring ``[REDACTED:...].txt`` would leave the real file alone and create one literally named
after the marker (issue 29). A name is resolved in the session that recorded it or, for a path
inherited from a fork, in the session it was forked from; a name whose sealed value is gone
(``forget``) or unreadable (no key) is not restored, and the restoration says why.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from coder_es.errors import CoderESError
from coder_es.redaction import MARKER
from coder_es.workspace.restore import ERROR, FileRestoration

PlanEntry = tuple[str, str | None, str | None]

UNRESOLVED = (
    "the file's name matches a redaction rule and was sealed; its sealed value is not "
    "available here (forgotten, or the sealing key is missing), so it was left as it is"
)


def lineage(app: Any, session: UUID, limit: int = 64) -> list[UUID]:
    """``session`` and the sessions it was forked from, nearest first."""
    out = [session]
    while len(out) < limit:
        first = app.session_events(out[-1], lte=1)
        parent = getattr(first[0], "parent_session", None) if first else None
        try:
            parent_id = UUID(str(parent)) if parent else None
        except ValueError:
            parent_id = None
        if parent_id is None or parent_id in out:
            break
        out.append(parent_id)
    return out


def real_name(app: Any, scopes: Sequence[UUID], path: str) -> str | None:
    """``path`` with its sealed parts resolved, or None when some part cannot be."""
    if "[REDACTED:" not in path or not MARKER.search(path):
        return path
    vault = app.sealing.vault
    for scope in scopes:
        try:
            resolved = vault.unseal_text(scope, path)
        except CoderESError:
            continue
        if not MARKER.search(resolved):
            return str(resolved)
    return None


def resolve_plan(
    app: Any, session: UUID, plan: Sequence[PlanEntry]
) -> tuple[list[PlanEntry], list[FileRestoration]]:
    """The restore plan with real names, and the entries whose name cannot be resolved (as
    restorations that did nothing, with the reason)."""
    if not any("[REDACTED:" in path for path, _, _ in plan):
        return list(plan), []
    scopes = lineage(app, session)
    resolved: list[PlanEntry] = []
    refused: list[FileRestoration] = []
    for path, base, target in plan:
        name = real_name(app, scopes, path)
        if name is None:
            refused.append(FileRestoration(path, ERROR, base, None, target, None, UNRESOLVED))
        else:
            resolved.append((name, base, target))
    return sorted(resolved), refused
