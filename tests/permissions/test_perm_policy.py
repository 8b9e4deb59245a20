"""Permission rules, presets and the documented evaluation order."""

from __future__ import annotations

from pathlib import Path

import pytest

from coder_es.permissions.policy import Policy
from coder_es.permissions.rules import (
    RuleSyntaxError,
    glob_match,
    parse_rule,
    split_command,
    suggest_pattern,
)
from coder_es.permissions.subject import Subject
from coder_es.tools.paths import path_subject


def cmd(text: str) -> Subject:
    return Subject("command", text)


def path(text: str, outside: bool = False) -> Subject:
    return Subject("path", text, outside)


def test_cli_rule_syntax() -> None:
    rule = parse_rule("bash:git *", "allow")
    assert (rule.tool, rule.pattern, rule.action) == ("bash", "git *", "allow")
    assert parse_rule("edit", "deny").pattern is None
    assert parse_rule("bash:git *", "allow").describe() == "user:allow bash:git *"
    for bad in ("", ":x", "bash:", "rm:*"):
        with pytest.raises(RuleSyntaxError):
            parse_rule(bad, "allow")


def test_globs_for_commands_and_paths() -> None:
    assert glob_match("git *", "git log --oneline src/a.py", "command")
    assert glob_match("git *", "git", "command")
    assert not glob_match("git *", "gitk", "command")
    assert glob_match("secrets/**", "secrets", "path")
    assert glob_match("secrets/**", "secrets/a/b.txt", "path")
    assert not glob_match("src/*.py", "src/pkg/a.py", "path")
    assert glob_match("**/*.py", "a.py", "path") and glob_match("**/*.py", "x/y/a.py", "path")


def test_compound_commands_split_and_hidden_commands_are_opaque() -> None:
    parts = split_command("git status && rm -rf build | wc -l; echo 'a && b'")
    assert [p.text for p in parts] == ["git status", "rm -rf build", "wc -l", "echo a && b"]
    assert all(not p.opaque for p in parts)
    # tee writes a file: no pattern allows the line's commands (the write rules decide).
    assert all(p.opaque for p in split_command("git status | tee x"))
    # The substitution's command is a part of its own; the echo, whose argument is unknown,
    # is opaque.
    assert [(p.text, p.opaque) for p in split_command("echo $(rm -rf /)")] == [
        ("rm -rf /", False),
        ("echo $(rm -rf /)", True),
    ]
    assert split_command("echo hi > notes.txt")[0].opaque
    assert split_command("echo 'unbalanced")[0].opaque


def test_user_deny_beats_everything_and_yes_cannot_undo_it() -> None:
    policy = Policy.for_agent("build", [parse_rule("edit:secrets/**", "deny")])
    ev = policy.evaluate("edit", path("secrets/key.txt"))
    assert (ev.action, ev.matched_rule) == ("deny", "user:deny edit:secrets/**")
    assert policy.evaluate("edit", path("src/a.py")).action == "allow"
    # An "always allow" answer does not override a deny rule either.
    always = [{"tool": "edit", "pattern": "**", "decision": "allow"}]
    assert policy.evaluate("edit", path("secrets/x"), always=always).action == "deny"


def test_plan_preset_allows_safe_commands_asks_others_denies_writes() -> None:
    plan = Policy.for_agent("plan")
    assert plan.evaluate("bash", cmd("git status")).action == "allow"
    assert plan.evaluate("bash", cmd("ls -la src")).action == "allow"
    assert plan.evaluate("bash", cmd("rm -rf build")).action == "ask"
    # One part that needs asking makes the whole command line ask.
    mixed = plan.evaluate("bash", cmd("git status && rm -rf build"))
    assert mixed.action == "ask" and mixed.matched_rule == "preset:plan:ask bash"
    assert plan.evaluate("bash", cmd("echo hi > x")).action == "ask"
    assert plan.evaluate("edit", path("a.py")).action == "deny"
    assert plan.evaluate("read", path("a.py")).action == "allow"


def test_explore_preset_is_read_only() -> None:
    explore = Policy.for_agent("explore")
    assert explore.evaluate("bash", cmd("git status")).action == "deny"
    assert explore.evaluate("write", path("a")).action == "deny"
    assert explore.evaluate("grep", path(".")).action == "allow"
    assert explore.preset.tools == ("read", "grep", "find")


def test_user_rules_override_the_preset_last_match_wins() -> None:
    policy = Policy.for_agent(
        "plan", [parse_rule("bash:npm *", "allow"), parse_rule("bash:npm publish *", "deny")]
    )
    assert policy.evaluate("bash", cmd("npm test")).action == "allow"
    assert policy.evaluate("bash", cmd("npm publish --tag x")).action == "deny"


def test_paths_outside_the_workspace_need_an_explicit_rule(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "link").symlink_to(tmp_path)
    subject = path_subject("link/other.txt", root)
    assert subject.outside and subject.text == (tmp_path / "other.txt").as_posix()
    assert path_subject("../ws/a.txt", root) == Subject("path", "a.txt", False)
    build = Policy.for_agent("build")
    ev = build.evaluate("read", subject)
    assert (ev.action, ev.matched_rule) == ("ask", "outside_workspace")
    assert (
        Policy.for_agent("build", [parse_rule("read", "allow")]).evaluate("read", subject).action
        == "ask"
    )
    explicit = Policy.for_agent("build", [parse_rule(f"read:{tmp_path.as_posix()}/**", "allow")])
    assert explicit.evaluate("read", subject).action == "allow"
    assert (
        Policy.for_agent("build", [parse_rule("read", "deny")]).evaluate("read", subject).action
        == "deny"
    )


def test_doom_loop_asks_even_when_allowed() -> None:
    policy = Policy.for_agent("build")
    assert policy.evaluate("bash", cmd("make"), repeats=1).action == "allow"
    ev = policy.evaluate("bash", cmd("make"), repeats=2)
    assert (ev.action, ev.matched_rule) == ("ask", "doom_loop")
    assert "3 times in a row" in ev.reason


def test_always_answers_apply_to_matching_later_calls() -> None:
    policy = Policy.for_agent("plan")
    always = [{"tool": "bash", "pattern": "npm test *", "decision": "allow"}]
    assert policy.evaluate("bash", cmd("npm test -- -k x"), always=always).action == "allow"
    assert policy.evaluate("bash", cmd("npm install"), always=always).action == "ask"
    denied = [{"tool": "bash", "pattern": "curl *", "decision": "deny"}]
    assert policy.evaluate("bash", cmd("curl example.com"), always=denied).action == "deny"


def test_suggested_always_patterns() -> None:
    assert suggest_pattern("command", "git status --short") == "git status *"
    assert suggest_pattern("command", "ls -la") == "ls *"
    assert suggest_pattern("command", "a && b") == "a && b"
    assert suggest_pattern("path", "src/pkg/a.py") == "src/pkg/**"
    assert suggest_pattern("path", "README.md") == "**"


def test_user_allow_rules_offer_tools_the_preset_leaves_out() -> None:
    assert Policy.for_agent("plan").tools == ("read", "grep", "find", "bash")
    widened = Policy.for_agent("plan", [parse_rule("write", "allow"), parse_rule("edit", "deny")])
    assert widened.tools == ("read", "grep", "find", "bash", "write")
    assert Policy.for_agent("explore", [parse_rule("*", "allow")]).tools[-3:] == (
        "bash",
        "write",
        "edit",
    )


@pytest.mark.parametrize(
    "line",
    [
        "echo made > made.txt",
        "echo $(date) >> log.txt",
        "git status | tee out.txt",
        'X=1 sh -c "$CMD"',
    ],
)
@pytest.mark.parametrize("action", ["ask", "defer"])
def test_a_users_ask_for_every_command_covers_the_opaque_ones_too(line: str, action: str) -> None:
    # Found by the harness bridge's chat test: `bash = "ask"` in a config (`bash:*`) let the
    # build preset's tool-wide allow decide `echo made > made.txt`, because an opaque part was
    # covered by no ask pattern. A user's ask or defer only tightens, so it covers what a
    # pattern cannot prove (an allow still does not).
    tightened = Policy.for_agent("build", [parse_rule("bash:*", action)])
    assert tightened.evaluate("bash", cmd(line)).action in (action, "ask")
    assert tightened.evaluate("bash", cmd(line)).action != "allow"
    allowed = Policy.for_agent("plan", [parse_rule("bash:*", "allow")])
    assert allowed.evaluate("bash", cmd(line)).action != "allow"
