"""What a session's events say it runs with, folded (issue 36.1): the part of
``coder_es.agent.settings`` that needs no configuration, low enough for ``coder_es.branching``
(a fork into a new session carries the settings in force) and every reader of a log.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RecordedSettings:
    """What a session's events say it runs with (no configuration involved)."""

    agent: str = "build"
    provider: str = ""
    model: str = ""
    started: Mapping[str, Any] = field(default_factory=dict)
    """The ``Started`` settings (prompt, permissions, agents, budget, hooks...)."""
    changed_permissions: Mapping[str, Any] | None = None
    """The last ``PermissionsChanged`` ({rules, default}); None: the ``Started`` ones hold."""
    changed_budget: int | None = None
    """The last ``SettingsChanged``'s budget; None: the ``Started`` one holds."""
    changed_hooks: tuple[Mapping[str, Any], ...] | None = None
    """The last ``HooksChanged``'s; None: the ``Started`` settings' hold."""

    def apply(self, event: Any) -> RecordedSettings:
        """These settings after ``event`` (the same object when it changes none)."""
        # Here, not at the top: a new harness session's settings (``RecordedSettings`` made,
        # not folded) are known before its harness starts, without the aggregate's modules.
        from coder_es.domain.session import Session

        if isinstance(event, Session.Started):
            return RecordedSettings(
                agent=event.agent,
                provider=event.provider,
                model=event.model,
                started=dict(event.settings),
            )
        if isinstance(event, Session.SettingsChanged):
            return dataclasses.replace(
                self,
                agent=event.agent,
                provider=event.provider,
                model=event.model,
                changed_budget=event.context_budget,
            )
        if isinstance(event, Session.PermissionsChanged):
            return dataclasses.replace(
                self,
                changed_permissions={
                    "rules": [dict(r) for r in event.rules],
                    "default": event.default,
                },
            )
        if isinstance(event, Session.HooksChanged):
            return dataclasses.replace(self, changed_hooks=tuple(dict(h) for h in event.hooks))
        return self

    def permission_records(self) -> tuple[list[dict[str, Any]], str]:
        """The user's rules (as recorded) and default in force (as ``LoopState``'s)."""
        recorded = self.changed_permissions or self.started.get("permissions") or {}
        return [dict(r) for r in recorded.get("rules", [])], str(recorded.get("default", "ask"))

    def hook_records(self) -> list[dict[str, Any]]:
        recorded = (
            self.changed_hooks if self.changed_hooks is not None else self.started.get("hooks")
        )
        return [dict(h) for h in recorded or []]

    def carried(self) -> dict[str, Any]:
        """The ``Started`` settings of a fork into a new session: this session's, with the
        permissions, hooks and budget in force in place of those it started with. A fork
        continues the same conversation, so it decides as this session does from the fork's
        node (which, settings following the log and not the branch, is as it does now)."""
        settings = dict(self.started)
        if self.changed_permissions is not None:
            settings["permissions"] = {
                "rules": [dict(r) for r in self.changed_permissions.get("rules", [])],
                "default": self.changed_permissions.get("default", "ask"),
            }
        if self.changed_hooks is not None:
            settings["hooks"] = [dict(h) for h in self.changed_hooks]
        budget = self.context_budget()
        if budget is not None:
            settings["context_budget"] = budget
        return settings

    def context_budget(self) -> int | None:
        if self.changed_budget:  # as the service always read it (a 0 never was a budget)
            return self.changed_budget
        started = self.started.get("context_budget")
        return started if isinstance(started, int) and started > 0 else None


def recorded_settings(events: Iterable[Any]) -> RecordedSettings:
    settings = RecordedSettings()
    for event in events:
        settings = settings.apply(event)
    return settings
