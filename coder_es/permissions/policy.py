"""Evaluating a tool call against the rules: allow, ask, defer or deny, and which rule said so.

``defer`` (a ``--defer RULE`` or ``[permissions] defer``) is a question that parks: the turn
stops in a recorded "waiting" state until someone answers it from any process
(``coder-es approve`` / ``deny``); it ranks between ask and deny.

The order, first decisive step wins. A shell command line is read with a real shell grammar
(``shell_parse``) into every simple command it runs, wrappers unwrapped; each command, each file
it writes (redirections, ``tee``, ``dd of=``: checked as a ``write`` of that path) and each path
outside the workspace it names (checked as a ``read`` of that path) goes through these steps, and
the strictest outcome wins: deny over ask over allow. A command the parser cannot see through
(``$X`` as the name, ``eval "$x"``, ``sh`` reading a pipe, unparseable input) is denied by a
matching deny rule and otherwise asks, whatever the allow rules say.

1. a user ``deny`` rule, or an earlier "always deny" answer, that matches: **deny**;
1a. a shell command given a variable off the allow-list (``X=1 cmd``, ``export X``, ``env -i``;
   ``shell_parse.FORMATTING_VARIABLES``) while a deny rule names commands: **ask** (the variable
   may make it run what the rule names: ``GIT_CONFIG_*``, ``LD_PRELOAD``, ``PATH``); without
   such a rule it is only kept from pattern allows;
1b. a shell command the parser cannot see through (``part.hidden``): **ask** (a preset deny
   still denies);
1c. a write to ``.git/hooks/**`` or ``.git/config`` (``permissions.protected``): **ask**, whatever
   the rules, answers or preset below would say (a shell redirection to them too);
2. a doom loop (this call is identical to the ``doom_threshold - 1`` calls just before it):
   **ask**, even if a rule would allow it, so a human can break the loop;
3. an earlier "always allow" answer that covers the subject: **allow**;
4. the user's rules (``--allow``/``--deny``/ask), the last matching one: its action;
5. a path outside the workspace that no user rule covered: **ask** (preset rules never cover
   outside paths; an explicit rule or answer with an absolute pattern is needed);
6. the agent preset's rules, the last matching one: its action (for an MCP tool: the preset's
   action for the tool's annotated effect, read-only, write or destructive);
7. nothing matched: **ask**.

For a path outside the workspace only rules and answers with an absolute pattern (``/tmp/**``)
match, except that a pattern-less deny rule still denies.

The evaluation is a pure function of the call, the rules and the session's recorded answers,
so replaying a session re-derives every rule decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from coder_es.permissions.presets import Preset, get_preset
from coder_es.permissions.protected import PROTECTED_RULE, always_asks
from coder_es.permissions.rules import (
    TOOL_NAMES,
    CommandPart,
    Rule,
    RuleSyntaxError,
    split_command,
    suggest_pattern,
)
from coder_es.permissions.subject import Subject

# ``defer`` is a question that waits for an answer from any process: stricter than one asked
# now (nothing runs until a person answers, wherever they are), weaker than a deny. ``schedule``
# runs the call without anyone asked, only later (in its window): stricter than an allow, looser
# than any question.
_STRICTNESS = {"allow": 0, "schedule": 1, "ask": 2, "defer": 3, "deny": 4}

DOOM_LOOP_RULE = "doom_loop"
OUTSIDE_RULE = "outside_workspace"
HIDDEN_RULE = "shell_hidden"
UNTRUSTED_SOURCE = "untrusted-project"
"""The source of a rule from an untrusted project config (``config.untrusted``): a deny or ask
that may only make a decision stricter, never turn a deny into a question."""


_ANY_TOOL = tuple(n for n in TOOL_NAMES if n != "task")


@dataclass(frozen=True)
class Evaluation:
    action: str  # "allow" | "schedule" | "ask" | "defer" | "deny"
    matched_rule: str
    reason: str
    subject: Subject
    # What an "always" answer would cover if the answerer does not choose a pattern.
    suggested_pattern: str


@dataclass(frozen=True)
class Policy:
    preset: Preset
    user_rules: tuple[Rule, ...] = ()
    doom_threshold: int = 3
    default: str = "ask"
    """The action for a call no explicit rule decides, where the preset would ask (config
    ``permissions.default``)."""

    @classmethod
    def for_agent(cls, agent: str, user_rules: Sequence[Rule] = (), default: str = "ask") -> Policy:
        if default not in ("allow", "ask", "defer", "deny"):
            msg = f"the default permission must be allow, ask, defer or deny, not {default!r}"
            raise RuleSyntaxError(msg)
        return cls(preset=get_preset(agent), user_rules=tuple(user_rules), default=default)

    @property
    def shell_read_only(self) -> bool:
        """Whether shell commands must run on a read-only file system (the ``plan`` and
        ``explore`` presets); the sandbox enforces it, whatever the command line says."""
        return self.preset.read_only_shell

    @property
    def tools(self) -> tuple[str, ...]:
        """The tools offered to the model: the preset's, plus any a user rule allows or asks for
        (``--allow write`` with the ``plan`` agent offers ``write``)."""
        extra: list[str] = []
        for rule in self.user_rules:
            if rule.action == "deny" or rule.source == UNTRUSTED_SOURCE:
                continue
            # ``*`` widens to the file and shell tools: subagents come with the preset or by
            # name (a session recorded before ``task`` existed is offered what it was).
            names = _ANY_TOOL if rule.tool == "*" else (rule.tool,)
            extra += [n for n in names if n not in self.preset.tools and n not in extra]
        return (*self.preset.tools, *extra)

    def offers_mcp(self, tool: str, effect: str) -> bool:
        """Whether an MCP tool with this annotated effect is offered: the preset does not deny
        it, or a user rule allows or asks for it."""
        if self.preset.mcp_action(effect) != "deny":
            return True
        return any(
            r.action != "deny" and r.source != UNTRUSTED_SOURCE and r.covers_tool(tool)
            for r in self.user_rules
        )

    def to_settings(self) -> dict[str, Any]:
        """The rules in force, as recorded in a session's settings."""
        return {
            "agent": self.preset.name,
            "rules": [
                {"tool": r.tool, "pattern": r.pattern, "action": r.action}
                # Recorded only where it changes decisions, so replay decides the same.
                | ({"source": r.source} if r.source == UNTRUSTED_SOURCE else {})
                | ({"window": r.window} if r.window is not None else {})
                for r in self.user_rules
            ],
            "doom_threshold": self.doom_threshold,
            "default": self.default,
        }

    def evaluate(
        self,
        tool: str,
        subject: Subject,
        *,
        always: Sequence[dict[str, Any]] = (),
        repeats: int = 0,
    ) -> Evaluation:
        """Decide one call. ``repeats``: how many calls right before it were identical to it."""
        full = self._evaluate(tool, subject, always, repeats)
        trusted = tuple(r for r in self.user_rules if r.source != UNTRUSTED_SOURCE)
        if len(trusted) == len(self.user_rules):
            return full
        # Rules of an untrusted project only tighten: the stricter of with and without them.
        without = replace(self, user_rules=trusted)._evaluate(tool, subject, always, repeats)
        return full if _STRICTNESS[full.action] >= _STRICTNESS[without.action] else without

    def _evaluate(
        self, tool: str, subject: Subject, always: Sequence[dict[str, Any]], repeats: int
    ) -> Evaluation:
        suggested = suggest_pattern(subject.kind, subject.text)
        if subject.kind == "command":
            parts = split_command(subject.text)
        else:
            parts = [CommandPart(subject.text, False)]
        outcomes = [self._evaluate_part(tool, subject, part, always, repeats) for part in parts]
        for other_tool, other in subject.related:
            action, rule, reason = self._evaluate_part(
                other_tool, other, CommandPart(other.text, other.opaque), always, 0
            )
            outcomes.append((action, rule, f"{other_tool} {other.text}: {reason}"))
        action, rule, reason = max(outcomes, key=lambda o: _STRICTNESS[o[0]])
        return Evaluation(action, rule, reason, subject, suggested)

    def _evaluate_part(
        self,
        tool: str,
        subject: Subject,
        part: CommandPart,
        always: Sequence[dict[str, Any]],
        repeats: int,
    ) -> tuple[str, str, str]:
        kind, outside = subject.kind, subject.outside
        text, opaque = part.text, part.opaque

        def covers(rule: Rule) -> bool:
            if not rule.covers_tool(tool):
                return False
            if rule.pattern is None:
                # A tool-wide allow/ask is not "explicit" enough for an outside path.
                return not outside or rule.action == "deny"
            if outside and not rule.pattern.startswith("/"):
                return False
            if opaque and rule.action in ("allow", "schedule"):
                # A pattern cannot prove what an opaque part is, so it cannot allow it; a deny,
                # ask or defer only tightens, so it covers it (``bash:*`` asks for every line).
                return False
            return rule.matches(tool, kind, text)

        answers = [
            Rule(a["tool"], a.get("pattern"), a["decision"], "always")
            for a in always
            if a.get("decision") in ("allow", "deny")
        ]
        for rule in (*self.user_rules, *answers):
            if rule.action == "deny" and covers(rule):
                return "deny", rule.describe(), f"denied by {rule.describe()}"
        if (
            opaque
            and kind == "path"
            and any(
                r.action == "deny" and r.pattern is not None and r.covers_tool(tool)
                for r in (*self.user_rules, *answers)
            )
        ):
            # An unknown path (``> $OUT``) may be one a deny rule names.
            return (
                "ask",
                HIDDEN_RULE,
                f"cannot tell which file {text!r} is: a deny rule names paths",
            )
        if (
            part.environment is not None
            and kind == "command"
            and any(
                r.action == "deny" and r.pattern is not None and r.covers_tool(tool)
                for r in (*self.user_rules, *answers)
            )
        ):
            return (
                "ask",
                HIDDEN_RULE,
                f"{part.environment} set by the line can make {text!r} run another program:"
                " a deny rule names commands",
            )
        if part.hidden is not None:
            # Nothing but a deny can decide a command whose identity is unknown.
            preset = _last_match(self.preset.rules, covers)
            if preset is not None and preset.action == "deny":
                return "deny", preset.describe(), f"denied by {preset.describe()}"
            return "ask", HIDDEN_RULE, f"cannot tell what {text!r} runs: {part.hidden}"
        protected = always_asks(tool, kind, text)
        if protected is not None:
            return "ask", PROTECTED_RULE, protected
        if self.doom_threshold > 1 and repeats >= self.doom_threshold - 1:
            return (
                "ask",
                DOOM_LOOP_RULE,
                f"the same {tool} call was made {repeats + 1} times in a row",
            )
        for rule in answers:
            if rule.action == "allow" and covers(rule):
                return "allow", rule.describe(), "allowed earlier for the rest of the session"
        user = _last_match(self.user_rules, covers)
        if user is not None:
            return user.action, user.describe(), f"{user.action} by {user.describe()}"
        if outside:
            return "ask", OUTSIDE_RULE, f"{text} is outside the workspace"
        if kind == "mcp":
            action = self.preset.mcp_action(subject.effect)
            if action != "ask" or self.default == "ask":
                named = f"preset:{self.preset.name}:{action} mcp {subject.effect}"
                return (
                    action,
                    named,
                    f"{action} by the {self.preset.name} preset: {subject.effect} tool",
                )
            return self.default, f"default:{self.default}", "no explicit rule decides this call"
        preset = _last_match(self.preset.rules, covers)
        if preset is not None and (preset.action != "ask" or self.default == "ask"):
            return preset.action, preset.describe(), f"{preset.action} by {preset.describe()}"
        # Nothing explicit decided: the preset would ask (or no rule covers the call). The
        # configured default answers instead; explicit asks above (user rules, repeated calls,
        # outside paths) still ask.
        return self.default, f"default:{self.default}", "no explicit rule decides this call"


def _last_match(rules: Sequence[Rule], covers: Any) -> Rule | None:
    for rule in reversed(rules):
        if covers(rule):
            return rule
    return None


@dataclass(frozen=True)
class PermissionAnswer:
    """An answer to an "ask": allow once, allow always (for ``pattern``), reject, or defer
    (park the question: it waits for an answer from any process; ``decided_by`` then names
    who parked it, e.g. ``run --defer``)."""

    decision: str  # "allow" | "deny" | "defer"
    scope: str = "once"  # "once" | "always"
    pattern: str | None = None
    reason: str | None = None
    decided_by: str = "user"  # "user" | "client" | "recording"
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def allow_once(cls, decided_by: str = "user") -> PermissionAnswer:
        return cls("allow", "once", decided_by=decided_by)

    @classmethod
    def allow_always(cls, pattern: str | None = None, decided_by: str = "user") -> PermissionAnswer:
        return cls("allow", "always", pattern, decided_by=decided_by)

    @classmethod
    def defer(cls, source: str) -> PermissionAnswer:
        return cls("defer", "once", decided_by=source)

    @classmethod
    def reject(cls, reason: str, decided_by: str = "user") -> PermissionAnswer:
        return cls("deny", "once", None, reason, decided_by)
