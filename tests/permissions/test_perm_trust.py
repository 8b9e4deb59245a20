"""The permission layer's share of issue 17, point 3: rules of an untrusted project only tighten,
and writes to git hooks or the git config always ask."""

from __future__ import annotations

from coder_es.agent.settings import rules_from_records
from coder_es.permissions.policy import UNTRUSTED_SOURCE, Policy
from coder_es.permissions.protected import PROTECTED_RULE
from coder_es.permissions.rules import Rule
from coder_es.permissions.subject import Subject


def path(text: str) -> Subject:
    return Subject("path", text)


def untrusted(tool: str, action: str, pattern: str | None = None) -> Rule:
    return Rule(tool, pattern, action, UNTRUSTED_SOURCE)


def test_an_untrusted_ask_never_turns_a_deny_into_a_question() -> None:
    plan = Policy.for_agent("plan", [untrusted("write", "ask"), untrusted("bash", "ask")])
    assert plan.evaluate("write", path("a.txt")).action == "deny"
    assert "write" not in plan.tools
    strict = Policy.for_agent("build", [untrusted("bash", "ask")], default="deny")
    assert strict.evaluate("bash", Subject("command", "ls")).action == "ask"
    explore = Policy.for_agent("explore", [untrusted("bash", "ask")])
    assert explore.evaluate("bash", Subject("command", "ls")).action == "deny"


def test_an_untrusted_ask_or_deny_still_tightens() -> None:
    build = Policy.for_agent(
        "build",
        [Rule("bash", None, "allow"), untrusted("bash", "ask"), untrusted("bash", "deny", "rm *")],
    )
    asked = build.evaluate("bash", Subject("command", "make test"))
    assert (asked.action, asked.matched_rule) == ("ask", f"{UNTRUSTED_SOURCE}:ask bash")
    assert build.evaluate("bash", Subject("command", "rm -r src")).action == "deny"
    denied = Policy.for_agent("build", [untrusted("edit", "deny", "*.lock")])
    assert denied.evaluate("edit", path("poetry.lock")).action == "deny"


def test_untrusted_rules_are_recorded_as_such_so_replay_decides_the_same() -> None:
    policy = Policy.for_agent("plan", [untrusted("write", "ask"), Rule("read", None, "allow")])
    records = policy.to_settings()["rules"]
    assert records == [
        {"tool": "write", "pattern": None, "action": "ask", "source": UNTRUSTED_SOURCE},
        {"tool": "read", "pattern": None, "action": "allow"},
    ]
    rebuilt = Policy.for_agent("plan", rules_from_records(records))
    assert rebuilt.evaluate("write", path("a.txt")).action == "deny"


def test_writing_git_hooks_or_config_always_asks() -> None:
    allow_all = Policy.for_agent("build", [Rule("*", None, "allow"), Rule("write", "**", "allow")])
    answers = [{"tool": "write", "pattern": "**", "decision": "allow"}]
    for target in (".git/hooks/pre-commit", ".git/config", "vendor/lib/.git/hooks/post-checkout"):
        for tool in ("write", "edit"):
            decided = allow_all.evaluate(tool, path(target), always=answers)
            assert (decided.action, decided.matched_rule) == ("ask", PROTECTED_RULE), target
    # Reading them is not a write; other files under .git are not code that runs.
    assert allow_all.evaluate("read", path(".git/config")).action == "allow"
    assert allow_all.evaluate("write", path(".git/info/exclude")).action == "allow"
    # A deny is stricter and still denies.
    denying = Policy.for_agent("build", [Rule("write", ".git/**", "deny")])
    assert denying.evaluate("write", path(".git/hooks/pre-commit")).action == "deny"
