"""Issue 36.1: a harness session's settings are ``SessionSettings`` too, derived from its log plus
the configuration, as a native session's: its ``Started`` records the harness, the rules, the
default and the hooks it starts with; ``run --session S`` records what it changes
(``SettingsChanged``, ``PermissionsChanged``, ``HooksChanged``) before its turn; a fork carries
the harness and the settings in force.

No harness runs here: the sessions are recorded as a first turn records them
(``HarnessSession.started_settings``), and the settings a turn would run with are compared with
the projection of the log.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "agent"))

from agent_helpers import Harness, make_harness

from coder_es.agent.settings import RecordedHarness, session_settings
from coder_es.branching import Branching
from coder_es.domain.session import Session
from coder_es.harness.runner import HarnessSession
from coder_es.harness.spec import HarnessSpec
from coder_es.hooks.spec import HookSpec
from coder_es.permissions.rules import Rule

SPEC = HarnessSpec("mine", "acp", ("my-agent", "--acp"), {"MY_KEY": "secret-value"})
# ``[harnesses.mine]``: what a continued session runs with (its env values are not recorded).
CONFIGURED = {
    "mine": {"kind": "acp", "command": ["my-agent", "--acp"], "env": {"MY_KEY": "secret-value"}}
}
ALLOW_GIT = Rule("bash", "git *", "allow", "--allow")
DENY_RM = Rule("bash", "rm *", "deny", "--deny")
STOP = HookSpec.from_record({"event": "Stop", "command": "true"})


@pytest.fixture
def h(tmp_path: Path) -> Any:
    harness = make_harness(tmp_path)
    yield harness
    harness.app.close()


def _recorded(h: Harness, first: HarnessSession) -> str:
    """The session as its first turn records it (``HarnessTurn._record``): its ``Started``
    with the settings the turn ran with, the harness's own session id added."""
    settings = first.started_settings()
    settings["harness"] |= {"session_id": "h-1", "version": "1.0"}
    session = Session.start(
        id=first.session_id,
        workspace=str(h.root),
        agent=first.agent,
        provider=f"harness:{SPEC.name}",
        model="m",
        settings=settings,
    )
    session.add_user_message("hello")
    h.app.save(session)
    return str(session.id)


def _events(h: Harness, ref: str) -> list[Any]:
    return list(h.app.session_events(h.app.get_session(ref).id))


def test_a_new_harness_session_runs_with_what_its_started_event_will_record(h: Harness) -> None:
    writable = h.root.parent / "cache"
    first = HarnessSession.create(
        h.app,
        h.root,
        SPEC,
        rules=(ALLOW_GIT,),
        default_permission="deny",
        hooks=(STOP,),
        network=False,
        writable=(writable,),
    )
    before = first.settings_in_force()
    ref = _recorded(h, first)
    got = session_settings(_events(h, ref), first.settings_config())
    # The harness, named in the log (its env's names only, never their values).
    assert got.harness == RecordedHarness("mine", "acp", ("my-agent", "--acp"), ("MY_KEY",))
    assert "secret-value" not in repr(h.app.get_session(ref).settings)
    assert (got.agent, got.rules, got.default_permission) == ("build", (ALLOW_GIT,), "deny")
    assert [hook.event for hook in got.hooks] == ["Stop"]
    # None of our tools: the harness runs its own.
    assert (got.tools, got.offered, dict(got.subagents)) == (None, (), {})
    assert got.sandbox is not None and got.sandbox.network_on is False
    assert got.sandbox.writable == (writable,)
    # What the first turn ran with is what its log says.
    assert (before.rules, before.default_permission, before.hooks, before.policy) == (
        got.rules,
        got.default_permission,
        got.hooks,
        got.policy,
    )
    assert before.harness == got.harness


def test_a_read_only_agent_gets_no_network_and_no_writable_places(h: Harness) -> None:
    plan = HarnessSession.create(h.app, h.root, SPEC, agent="plan", writable=(h.root.parent,))
    got = plan.settings_in_force()
    assert got.policy.shell_read_only
    assert got.sandbox is not None and got.sandbox.read_only and got.sandbox.writable == ()
    assert got.sandbox.network_on is False
    build = HarnessSession.create(h.app, h.root, SPEC).settings_in_force()
    assert build.sandbox is not None and build.sandbox.network_on is True


def test_a_continued_session_records_what_the_run_changes_then_runs_with_its_log(
    h: Harness,
) -> None:
    first = HarnessSession.create(
        h.app, h.root, SPEC, rules=(ALLOW_GIT,), default_permission="ask", hooks=(STOP,)
    )
    ref = _recorded(h, first)
    # `run --session S --agent plan --deny 'rm *'` with no hooks configured any more.
    again = HarnessSession.open(
        h.app,
        h.root,
        ref,
        None,
        CONFIGURED,
        agent="plan",
        rules=(DENY_RM,),
        hooks=(),
        default_permission="ask",
    )
    assert again.spec == SPEC  # the configured env included
    settings = again.settings_in_force()
    kinds = [type(e).__name__ for e in _events(h, ref)]
    assert kinds[-3:] == ["SettingsChanged", "PermissionsChanged", "HooksChanged"]
    # The command line's rule goes after those in force (the last match wins).
    assert settings.rules == (
        Rule("bash", "git *", "allow", "--allow"),
        Rule("bash", "rm *", "deny", "--deny"),
    )
    assert settings.agent == "plan" and settings.policy.shell_read_only
    assert settings.hooks == ()
    assert settings == session_settings(_events(h, ref), again.settings_config())
    # The same run again changes nothing: nothing more is recorded.
    count = len(kinds)
    HarnessSession.open(
        h.app, h.root, ref, None, CONFIGURED, rules=(DENY_RM,), hooks=(), default_permission="ask"
    ).settings_in_force()
    assert len(_events(h, ref)) == count
    # A client that gives no rules nor hooks (the ACP bridge) runs with those in force: the
    # rule given at the start still decides, as the log says.
    bare = HarnessSession.open(h.app, h.root, ref, None, CONFIGURED).settings_in_force()
    assert len(_events(h, ref)) == count
    assert bare.rules == settings.rules and bare.agent == "plan"
    assert bare.policy.evaluate("bash", _command("git status", h.root)).action == "allow"


def test_a_fork_carries_the_harness_and_the_settings_in_force(h: Harness) -> None:
    first = HarnessSession.create(h.app, h.root, SPEC, rules=(ALLOW_GIT,), hooks=(STOP,))
    ref = _recorded(h, first)
    again = HarnessSession.open(
        h.app, h.root, ref, None, CONFIGURED, rules=(DENY_RM,), default_permission="deny"
    )
    parent = again.settings_in_force()
    forked = Branching(h.app, h.root).fork(ref, None, new_session=True)
    child = h.app.get_session(forked.session)
    got = session_settings(_events(h, str(child.id)), again.settings_config())
    assert (
        got.harness
        == parent.harness
        == RecordedHarness("mine", "acp", ("my-agent", "--acp"), ("MY_KEY",))
    )
    assert (got.rules, got.default_permission) == (parent.rules, "deny")
    assert got.hooks == parent.hooks and [hook.event for hook in got.hooks] == ["Stop"]
    # And the fork is continued as a harness session of its own, with those settings.
    fork = HarnessSession.open(h.app, h.root, str(child.id), None, CONFIGURED)
    assert fork.spec.name == "mine"
    assert fork.settings_in_force().rules == parent.rules
    assert "PermissionsChanged" not in [type(e).__name__ for e in _events(h, str(child.id))]


def _command(command: str, root: Path) -> Any:
    from coder_es.tools.paths import command_subject

    return command_subject(command, root)
