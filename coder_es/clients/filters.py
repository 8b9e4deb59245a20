"""Server-side answers to permission questions, from ``[serve.rules]`` (hot-reloadable).

A rule ``allow`` approves a question without asking the client, ``deny`` refuses it, ``ask``
forwards it. For a shell command every part must be allowed for the whole to be (a part that
hides another command, like ``$(...)``, is never allowed by a pattern), and one denied part
denies the whole, as the permission layer itself does. The last matching rule wins.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from coder_es.agent.updates import PermissionRequired
from coder_es.config import RuleConfig
from coder_es.permissions.policy import PermissionAnswer
from coder_es.permissions.rules import Rule, configured_rule, split_command


@dataclass(frozen=True)
class ApprovalFilter:
    rules: tuple[Rule, ...] = ()

    @classmethod
    def from_config(cls, rules: Iterable[RuleConfig]) -> ApprovalFilter:
        return cls(
            tuple(
                configured_rule(
                    r.tool, None if r.pattern in ("", "*") else r.pattern, r.action, "serve"
                )
                for r in rules
            )
        )

    def _part(self, tool: str, kind: str, text: str, opaque: bool) -> Rule | None:
        for rule in reversed(self.rules):
            if not rule.matches(tool, kind, text):
                continue
            if opaque and rule.pattern is not None and rule.action == "allow":
                continue
            return rule
        return None

    def decide(self, question: PermissionRequired) -> PermissionAnswer | None:
        """The server's answer, or None to ask the client."""
        if not self.rules:
            return None
        if question.tool == "bash":
            kind = "command"
            parts: Sequence[tuple[str, bool]] = [
                (p.text, p.opaque) for p in split_command(question.subject)
            ] or [(question.subject, False)]
        else:
            kind = "path"
            parts = [(question.subject, False)]
        matched = [self._part(question.tool, kind, text, opaque) for text, opaque in parts]
        denied = next((r for r in matched if r is not None and r.action == "deny"), None)
        if denied is not None:
            return PermissionAnswer.reject(
                f"denied by the server rule {denied.describe()}", decided_by="rule"
            )
        if all(r is not None and r.action == "allow" for r in matched):
            rule = matched[-1]
            assert rule is not None
            return PermissionAnswer(
                "allow",
                "once",
                reason=f"allowed by the server rule {rule.describe()}",
                decided_by="rule",
            )
        return None
