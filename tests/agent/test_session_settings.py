"""Issue 36.1: a session's settings are one pure projection (events + configuration).

As a function, on events made by the aggregate alone (no store); and against what the running
loop actually uses (the service, the decider, ``task``), for new sessions, resumed ones under
another agent, rules or hooks (``SettingsChanged``, ``PermissionsChanged``, ``HooksChanged``),
and forks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent_helpers import Harness, collect, text, turn

from coder_es.agent.settings import SessionSettings, SettingsConfig, session_settings
from coder_es.branching import Branching
from coder_es.domain.session import Session
from coder_es.domain.settings import RecordedSettings, recorded_settings
from coder_es.permissions.rules import Rule
from coder_es.permissions.subject import Subject
from coder_es.sandbox import SandboxSettings
from coder_es.service.api import SessionHandle
from coder_es.tools.registry import default_registry

CONFIG = SettingsConfig(tools=default_registry(), context_budget=1234, max_tokens=99)
RULE = {"tool": "bash", "pattern": "git *", "action": "allow", "source": "user"}


def _events(session: Session) -> list[Any]:
    return list(session.collect_events())


def _started(**settings: Any) -> Session:
    return Session.start(
        workspace="/w", agent="build", provider="scripted", model="m1", settings=settings
    )


# ---------------------------------------------------------------------- as a function


def test_a_new_session_runs_with_what_it_recorded_else_the_configuration() -> None:
    s = _started(permissions={"rules": [RULE], "default": "deny"}, subagents=True)
    got = session_settings(_events(s), CONFIG)
    assert (got.agent, got.provider, got.model) == ("build", "scripted", "m1")
    assert got.rules == (Rule("bash", "git *", "allow", "user"),)
    assert got.default_permission == "deny"
    assert got.policy.preset.name == "build" and got.policy.user_rules == got.rules
    assert "task" in got.offered and set(got.subagents) == {"general", "explore"}
    # Nothing recorded: the configuration's budget, tokens and steps.
    assert (got.context_budget, got.max_tokens, got.max_steps) == (1234, 99, 50)
    assert got.hooks == ()


def test_a_session_recorded_before_subagents_is_never_offered_task() -> None:
    got = session_settings(_events(_started()), CONFIG)
    assert "task" not in got.offered and got.subagents == {}
    assert "task" not in got.policy.tools


def test_the_last_change_of_each_kind_is_in_force() -> None:
    s = _started(context_budget=5000, max_tokens=7, max_steps=3, subagents=True)
    s.change_settings(agent="plan", provider="openai", model="m2", context_budget=6000)
    s.change_permissions(rules=[RULE], default="ask")
    s.change_permissions(rules=[], default="allow")
    s.change_hooks(hooks=[{"event": "Stop", "command": "true"}])
    got = session_settings(_events(s), CONFIG)
    assert (got.agent, got.provider, got.model) == ("plan", "openai", "m2")
    assert got.rules == () and got.default_permission == "allow"
    assert got.context_budget == 6000 and got.max_tokens == 7 and got.max_steps == 3
    assert [h.event for h in got.hooks] == ["Stop"]
    # The plan preset: no write or edit; its shell runs read-only.
    assert "edit" not in got.offered and got.policy.shell_read_only
    sandboxed = session_settings(
        _events(_started()),
        SettingsConfig(tools=default_registry(), sandbox=SandboxSettings(mode="off")),
    )
    assert sandboxed.sandbox is not None and not sandboxed.sandbox.read_only
    s2 = _started()
    s2.change_settings(agent="plan", provider="p", model="m", context_budget=1)
    planned = session_settings(
        _events(s2), SettingsConfig(tools=default_registry(), sandbox=SandboxSettings(mode="off"))
    )
    assert planned.sandbox is not None and planned.sandbox.read_only


def test_the_fold_is_the_same_one_event_at_a_time() -> None:
    s = _started(subagents=True)
    s.change_permissions(rules=[RULE], default="deny")
    s.change_settings(agent="explore", provider="p", model="m", context_budget=77)
    events = _events(s)
    running = RecordedSettings()
    for cut, event in enumerate(events, start=1):
        running = running.apply(event)
        assert running == recorded_settings(events[:cut])
    whole = SessionSettings.of(running, CONFIG)
    assert whole == session_settings(events, CONFIG)
    assert whole.agent == "explore" and whole.context_budget == 77


def test_a_fork_starts_with_the_settings_in_force_not_those_the_parent_started_with() -> None:
    hooks = [{"event": "Stop", "command": "true"}]
    s = _started(permissions={"rules": [], "default": "ask"}, subagents=True, context_budget=500)
    s.change_permissions(rules=[RULE], default="deny")
    s.change_hooks(hooks=hooks)
    s.change_settings(agent="plan", provider="p", model="m2", context_budget=900)
    events = _events(s)
    parent = session_settings(events, CONFIG)
    carried = recorded_settings(events).carried()
    # What the parent started with stays as it was (only the changed keys are replaced).
    assert carried["subagents"] is True and s.settings["context_budget"] == 500
    child = Session.start(
        workspace="/w", agent=s.agent, provider=s.provider, model=s.model, settings=carried
    )
    got = session_settings(_events(child), CONFIG)
    assert (got.agent, got.rules, got.default_permission) == ("plan", parent.rules, "deny")
    assert got.policy == parent.policy and got.offered == parent.offered
    assert got.hooks == parent.hooks and [h.event for h in got.hooks] == ["Stop"]
    assert got.context_budget == parent.context_budget == 900
    # Nothing changed since Started: the fork starts with exactly the parent's settings.
    plain = _started(max_tokens=7)
    assert recorded_settings(_events(plain)).carried() == dict(plain.settings)


# ---------------------------------------------------------------------- what the loop uses


def _assert_loop_uses(handle: SessionHandle, h: Harness, budget: int) -> None:
    loop = handle.loop
    events = h.app.session_events(loop.session.id)
    config = SettingsConfig(
        tools=h.service([]).tools, context_budget=budget, max_tokens=loop.config.max_tokens
    )
    got = session_settings(events, config)
    decision = loop.deps.decision
    assert got.policy == decision.policy
    assert got.offered == decision.offered()
    assert got.tools.definitions(got.offered) == decision.tools.definitions(decision.offered())
    assert got.context_budget == loop.config.context_budget
    assert got.hooks == loop.hook_specs
    assert (got.agent, got.provider, got.model) == (
        loop.state.agent,
        loop.state.provider,
        loop.state.model,
    )


def test_the_projection_is_what_the_loop_runs_with(h: Harness) -> None:
    rule = Rule("bash", "git *", "allow", "user")
    handle = h.start([turn(text("hi"))], rules=[rule])
    _assert_loop_uses(handle, h, budget=1)
    # Resumed under another agent and more rules: SettingsChanged, PermissionsChanged.
    again = h.reopen(
        handle.id, [turn(text("hi"))], agent="plan", rules=(Rule("grep", None, "deny"),)
    )
    kinds = h.kinds(handle.id)
    assert "SettingsChanged" in kinds and "PermissionsChanged" in kinds
    _assert_loop_uses(again, h, budget=1)


def test_a_fork_runs_with_the_parents_settings_in_force(h: Harness, tmp_path: Path) -> None:
    handle = h.start([turn(text("one")), turn(text("two"))])
    collect(handle, "first")
    collect(handle, "second")
    h.reopen(handle.id, [turn(text("hi"))], agent="plan")
    branching = Branching(h.app, h.root)
    forked = branching.fork(handle.id, None, new_session=True)
    parent = session_settings(h.app.session_events(handle.loop.session.id), CONFIG)
    child_id = h.app.get_session(forked.session).id
    child = session_settings(h.app.session_events(child_id), CONFIG)
    assert child.agent == parent.agent == "plan"
    assert (child.provider, child.model) == (parent.provider, parent.model)
    assert child.policy.preset == parent.policy.preset
    assert child.context_budget == parent.recorded.started["context_budget"]
    # And the loop opened on the fork runs with the same settings.
    _assert_loop_uses(h.reopen(forked.session, [turn(text("hi"))]), h, budget=1)
    # A move within a session changes no setting (settings follow the log, not the branch).
    before = session_settings(h.app.session_events(handle.loop.session.id), CONFIG)
    moved = branching.checkout(handle.id, h.app.get_session(handle.id).node_ids()[0])
    assert moved.head_moved
    after = session_settings(h.app.session_events(handle.loop.session.id), CONFIG)
    assert (before.agent, before.rules, before.offered) == (after.agent, after.rules, after.offered)


def test_a_fork_after_a_permissions_change_decides_as_the_parent(h: Harness) -> None:
    handle = h.start([turn(text("one"))])
    collect(handle, "first")
    first = h.app.get_session(handle.id).node_ids()[-1]
    hooks_before = handle.loop.state.hooks_in_force()
    # Resumed under a rule and a default of its own: PermissionsChanged, then a turn.
    again = h.reopen(
        handle.id,
        [turn(text("two"))],
        rules=(Rule("bash", "git *", "deny"), Rule("grep", None, "deny")),
        default_permission="deny",
    )
    collect(again, "second")
    assert "PermissionsChanged" in h.kinds(handle.id)
    parent = again.loop.deps.decision.policy
    git, other = Subject("command", "git status"), Subject("command", "make")
    decided = [parent.evaluate("bash", git), parent.evaluate("bash", other)]
    assert [d.action for d in decided] == ["deny", "allow"] and parent.default == "deny"
    branching = Branching(h.app, h.root)
    for node in (None, first):  # at the head, and at a node before the change
        forked = branching.fork(handle.id, node, new_session=True)
        child = h.reopen(forked.session, [turn(text("hi"))])
        policy = child.loop.deps.decision.policy
        assert policy == parent
        assert [policy.evaluate("bash", git), policy.evaluate("bash", other)] == decided
        assert policy.evaluate("grep", Subject("path", "x")).action == "deny"
        assert child.loop.state.hooks_in_force() == hooks_before
        assert "PermissionsChanged" not in h.kinds(forked.session)  # carried, not re-recorded
        _assert_loop_uses(child, h, budget=1)
