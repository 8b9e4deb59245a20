"""A session whose user denied ``bash:rm*``: none of the reported bypasses removes a file
(issue 17, point 4), through the real loop, tools and store with the scripted provider."""

from __future__ import annotations

from agent_helpers import Harness, collect, text, tool, turn

from coder_es.permissions.rules import parse_rule

BYPASSES = {
    "b": "(rm b)",
    "c": "X=1 rm c",
    "d": "! rm d",
    "e": "echo $(rm e)",
    "f": "/bin/rm f",
    "g": "{ rm g; }",
    "h": "if true; then rm h; fi",
    "i": "command rm i",
    "j": "env rm j",
    "k": 'sh -c "rm k"',
    "l": "eval rm l",
    "m": "echo m | xargs rm",
    "n": "find . -name n -delete",
}


def test_no_reported_bypass_gets_past_a_deny_rule(h: Harness) -> None:
    for name in BYPASSES:
        (h.root / name).write_text(f"{name}\n")
    calls = [tool("bash", command=command) for command in BYPASSES.values()]
    handle = h.start(
        [turn(*calls), turn(text("nothing removed"))],
        rules=[parse_rule("bash:rm*", "deny")],
    )
    collect(handle, "remove the files")
    assert sorted(p.name for p in h.root.iterdir() if len(p.name) == 1) == sorted(BYPASSES)
    decided = h.of(handle, "PermissionDecided")
    assert [(d.decision, d.matched_rule) for d in decided] == [
        ("deny", "user:deny bash:rm*")
    ] * len(BYPASSES)
    # The same lines without the rule do remove the files: the attacks are real.
    again = h.start([turn(*calls), turn(text("removed"))])
    collect(again, "remove the files")
    assert not any((h.root / name).exists() for name in BYPASSES)
