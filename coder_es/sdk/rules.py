"""Permission rules in one call each: ``allow("bash:git *")``, ``ask("edit")``, ``deny("*")``.

The text is a rule as the command line takes it (``--allow``): ``TOOL`` or ``TOOL:PATTERN``
(``coder_es.permissions.rules`` has the pattern syntax). Among user rules the last match wins.
"""

from __future__ import annotations

from collections.abc import Iterable

from coder_es.permissions.rules import TOOL_NAMES, Rule, RuleSyntaxError, is_mcp_tool, parse_rule

API_SOURCE = "api"
"""What a rule made here names as its source (shown in ``matched_rule``)."""


def _rule(text: str, action: str) -> Rule:
    # The tool may be one of the caller's own (``Store.start(tools=...)``): its name is checked
    # when the session starts (``check_rules``), where the tools are known.
    tool, sep, pattern = text.strip().partition(":")
    name = tool.strip()
    own = bool(name) and name != "*" and name not in TOOL_NAMES and not is_mcp_tool(name)
    parsed = parse_rule(f"read{sep}{pattern}" if own else text, action, API_SOURCE)
    return Rule(name, parsed.pattern, parsed.action, API_SOURCE)


def check_rules(rules: Iterable[Rule], own_tools: Iterable[str]) -> None:
    """Refuse a rule naming a tool that is neither built in nor one of the caller's."""
    names = {*TOOL_NAMES, *own_tools, "*"}
    for rule in rules:
        if rule.tool not in names and not is_mcp_tool(rule.tool):
            msg = (
                f"bad permission rule for {rule.tool!r}: unknown tool; tools: "
                f"{', '.join(sorted(names - {'*'}))}"
            )
            raise RuleSyntaxError(msg)


def allow(rule: str) -> Rule:
    """Calls the rule matches run without asking."""
    return _rule(rule, "allow")


def ask(rule: str) -> Rule:
    """Calls the rule matches wait for an answer (``Session.answer`` or an answerer)."""
    return _rule(rule, "ask")


def deny(rule: str) -> Rule:
    """Calls the rule matches are refused (the model is told why)."""
    return _rule(rule, "deny")
