"""What one queued job asks: advance one session, with a new message or from where it stopped.

Jobs travel through the queue as JSON, so ``SessionJob.from_args`` checks everything it reads:
a malformed job is refused with a message naming the field, never half-run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from coder_es.permissions.rules import Rule, parse_rule
from coder_es.store.postgres_only import FleetUsageError

RULE_ACTIONS = ("allow", "schedule", "defer", "deny")


@dataclass(frozen=True)
class SessionJob:
    session_id: str
    prompt: str | None = None
    """A new user message; None resumes whatever the session was doing."""
    yes: bool = False
    """Answer permission questions with "allow once" (else they are rejected, saying why)."""
    defer: bool = False
    """Park permission questions instead of rejecting them (issue 34): the turn waits for
    ``coder-es approve`` / ``deny`` from any machine, which queues the session again."""
    provider: str | None = None
    model: str | None = None
    agent: str | None = None
    rules: tuple[tuple[str, str], ...] = ()
    """Extra (action, "TOOL[:PATTERN]") rules on top of those the session recorded."""
    max_steps: int = 50

    def __post_init__(self) -> None:
        try:
            UUID(self.session_id)
        except (ValueError, TypeError, AttributeError):
            raise FleetUsageError(f"job: session_id {self.session_id!r} is not a UUID") from None
        if self.prompt is not None and not self.prompt.strip():
            raise FleetUsageError("job: the prompt is empty")
        if self.max_steps < 1:
            raise FleetUsageError("job: max_steps must be at least 1")
        for action, text in self.rules:
            if action not in RULE_ACTIONS:
                raise FleetUsageError(
                    f"job: rule action {action!r} is not allow, schedule, defer or deny"
                )
            parse_rule(text, action)

    @property
    def lock(self) -> str:
        """The queue lock: jobs of one session run one at a time, in the order queued."""
        return f"session:{self.session_id}"

    def parsed_rules(self) -> tuple[Rule, ...]:
        return tuple(parse_rule(text, action) for action, text in self.rules)

    def to_args(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "prompt": self.prompt,
            "yes": self.yes,
            "defer": self.defer,
            "provider": self.provider,
            "model": self.model,
            "agent": self.agent,
            "rules": [list(r) for r in self.rules],
            "max_steps": self.max_steps,
        }

    @classmethod
    def from_args(cls, args: Mapping[str, Any]) -> SessionJob:
        unknown = set(args) - set(cls.__dataclass_fields__)
        if unknown:
            raise FleetUsageError(f"job: unknown fields {sorted(unknown)}")
        if "session_id" not in args:
            raise FleetUsageError("job: session_id is missing")

        def opt_str(key: str) -> str | None:
            value = args.get(key)
            if value is not None and not isinstance(value, str):
                raise FleetUsageError(f"job: {key} must be a string, not {value!r:.60}")
            return value

        rules_raw = args.get("rules", [])
        if not isinstance(rules_raw, list) or not all(
            isinstance(r, list | tuple) and len(r) == 2 and all(isinstance(x, str) for x in r)
            for r in rules_raw
        ):
            raise FleetUsageError(
                'job: rules must be a list of ["allow"|"schedule"|"defer"|"deny", "TOOL:PATTERN"]'
            )
        max_steps = args.get("max_steps", 50)
        if not isinstance(max_steps, int) or isinstance(max_steps, bool):
            raise FleetUsageError(f"job: max_steps must be an integer, not {max_steps!r:.60}")
        yes = args.get("yes", False)
        if not isinstance(yes, bool):
            raise FleetUsageError(f"job: yes must be true or false, not {yes!r:.60}")
        defer = args.get("defer", False)
        if not isinstance(defer, bool):
            raise FleetUsageError(f"job: defer must be true or false, not {defer!r:.60}")
        return cls(
            session_id=str(args["session_id"]),
            prompt=opt_str("prompt"),
            yes=yes,
            defer=defer,
            provider=opt_str("provider"),
            model=opt_str("model"),
            agent=opt_str("agent"),
            rules=tuple((r[0], r[1]) for r in rules_raw),
            max_steps=max_steps,
        )
