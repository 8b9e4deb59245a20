"""Permission rules that change while a session is open: recorded as ``PermissionsChanged``, and
the loop decides by them from then on."""

from __future__ import annotations

from agent_helpers import Harness, collect, text, tool, turn

from coder_es.agent import updates as up
from coder_es.permissions.rules import Rule
from coder_es.service.api import SessionHandle

WRITE_TWICE = [
    turn(tool("write", path="a.txt", content="a\n")),
    turn(text("Done.")),
    turn(tool("write", path="b.txt", content="b\n")),
    turn(text("Done.")),
]


def decisions(h: Harness, handle: SessionHandle | str) -> list[tuple[str, str, str | None]]:
    return [(e.decision, e.decided_by, e.matched_rule) for e in h.of(handle, "PermissionDecided")]


def test_a_resume_with_new_rules_records_them_once_and_they_stay(h: Harness) -> None:
    handle = h.start(WRITE_TWICE[:2], rules=(Rule("write", None, "ask"),))
    collect(handle, "write a", yes=False)  # nobody can say yes: the write is refused
    assert not (h.root / "a.txt").exists()

    allow = Rule("write", None, "allow")
    resumed = h.reopen(handle.id, WRITE_TWICE[2:], rules=(allow,))
    (changed,) = h.of(handle, "PermissionsChanged")
    # Appended to the rules in force: among user rules the last match wins.
    assert [(r["action"], r["source"]) for r in changed.rules] == [
        ("ask", "user"),
        ("allow", "user"),
    ]
    assert changed.default == "ask"
    collect(resumed, "write b", yes=False)
    assert (h.root / "b.txt").read_text() == "b\n"
    assert [d[:2] for d in decisions(h, handle)] == [("deny", "client"), ("allow", "rule")]
    assert decisions(h, handle)[1][2] == "user:allow write"

    # The same flags again change nothing; no flags keep the rules the session has.
    h.reopen(handle.id, [], rules=(allow,))
    again = h.reopen(
        handle.id, [turn(tool("write", path="c.txt", content="c\n")), turn(text("Done."))]
    )
    assert len(h.of(handle, "PermissionsChanged")) == 1
    collect(again, "write c", yes=False)
    assert (h.root / "c.txt").read_text() == "c\n"


def test_a_new_default_on_resume_is_recorded(h: Harness) -> None:
    handle = h.start([])
    h.reopen(handle.id, [], default_permission="deny")
    (changed,) = h.of(handle, "PermissionsChanged")
    assert (changed.rules, changed.default) == ([], "deny")
    h.reopen(handle.id, [], default_permission="deny")
    assert len(h.of(handle, "PermissionsChanged")) == 1


def test_an_update_during_a_turn_waits_for_its_end(h: Harness) -> None:
    handle = h.start(WRITE_TWICE, rules=(Rule("write", None, "allow"),))
    deferred: list[bool] = []

    async def deny_writes(handle: SessionHandle, update: up.Update) -> None:
        if isinstance(update, up.SessionOpened):
            deferred.append(handle.update_permissions((Rule("write", None, "deny"),), "ask"))

    collect(handle, "write a", yes=False, on_update=deny_writes)
    assert deferred == [False]
    # The running turn kept its rules; the change was recorded after the turn's last event.
    assert (h.root / "a.txt").read_text() == "a\n"
    assert h.kinds(handle)[-1] == "PermissionsChanged"

    collect(handle, "write b", yes=True)
    assert not (h.root / "b.txt").exists()
    assert [d[:2] for d in decisions(h, handle)] == [("allow", "rule"), ("deny", "rule")]


def test_an_update_to_the_rules_in_force_records_nothing(h: Harness) -> None:
    rules = (Rule("bash", "git *", "allow"),)
    handle = h.start([], rules=rules)
    assert handle.update_permissions(rules, "ask") is False
    assert h.of(handle, "PermissionsChanged") == []
