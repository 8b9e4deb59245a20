"""Shrunk failures of the workspace model (``authorship_machine``), kept as regular tests: each
failed on the code before issue 30."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from authorship_machine import WorkspaceModel, WorkspaceModelNoSandbox

from coder_es.sandbox import SandboxSettings, availability


@pytest.fixture
def model(tmp_path) -> Iterator[WorkspaceModel]:  # type: ignore[no-untyped-def]
    found = availability(SandboxSettings(), tmp_path)
    if not found.active:
        pytest.skip(f"the namespace sandbox is unavailable here: {found.reason}")
    machine = WorkspaceModel()
    try:
        yield machine
    finally:
        machine.teardown()


def _steps(model: WorkspaceModel, *steps: Callable[[], None]) -> None:
    for step in steps:
        step()
        model.no_user_line_is_lost()
        model.untouched_files_hold_the_sessions_content()
        model.no_completed_call_ran_twice()
        model.verify_passes()


def test_a_command_merged_with_a_concurrent_line_then_checkout_of_the_first_node(
    model: WorkspaceModel,
) -> None:
    _steps(
        model,
        lambda: model.agent_write(path="a.txt", read_first=False),
        lambda: model.agent_bash(concurrent=True, op="sed", path="a.txt"),
        lambda: model.checkout(index=0),
    )


def test_a_resumed_turn_does_not_run_its_completed_command_again(model: WorkspaceModel) -> None:
    _steps(
        model,
        lambda: model.agent_bash(concurrent=False, op="sed", path="a.txt"),
        lambda: model.resume_after_cancel(path="a.txt"),
    )


def test_a_command_that_renames_a_file_the_user_appends_to_meanwhile(
    model: WorkspaceModel,
) -> None:
    """The command's version of the renamed file is its absence: a conflict whose hint is
    ``rm``, and ``show --proposed`` says so."""
    _steps(
        model,
        lambda: model.agent_bash(concurrent=False, op="sed", path="a.txt"),
        lambda: model.rewind(index=292, mode="conversation"),
        lambda: model.agent_bash(concurrent=False, op="create", path="b.txt"),
        lambda: model.agent_bash(concurrent=True, op="rename", path="b.txt"),
    )


def test_a_write_after_a_conflicted_checkout_then_the_same_checkout(model: WorkspaceModel) -> None:
    _steps(
        model,
        lambda: model.user_appends(path="a.txt"),
        lambda: model.user_appends(path="a.txt"),
        lambda: model.user_appends(path="a.txt"),
        lambda: model.agent_write(path="b.txt", read_first=False),
        lambda: model.user_appends(path="b.txt"),
        lambda: model.checkout(index=0),
        lambda: model.agent_write(path="b.txt", read_first=False),
        lambda: model.checkout(index=0),
    )


def test_a_command_after_a_killed_checkout_still_reaches_its_gate(model: WorkspaceModel) -> None:
    """Shrunk from a 2,000-example run where one example took 120 s: after ``checkout_killed``
    reopened the store, commands lost the writable place beside the workspace (the ran log, the
    gates), so a concurrent command waited for a gate it could not see until its timeout, and
    the ran-twice invariant saw no command at all."""
    _steps(
        model,
        lambda: model.agent_bash(concurrent=True, op="sed", path="b.txt"),
        lambda: model.checkout_killed(delay=0.0, index=110),
        lambda: model.resume_after_cancel(path="sub/c.txt"),
        lambda: model.agent_bash(concurrent=True, op="sed", path="sub/c.txt"),
    )


@pytest.fixture
def no_sandbox() -> Iterator[WorkspaceModel]:
    machine = WorkspaceModelNoSandbox()
    try:
        yield machine
    finally:
        machine.teardown()


@pytest.mark.parametrize("op", ["sed", "append"])
def test_the_stat_index_takes_a_concurrent_line_for_the_commands(
    no_sandbox: WorkspaceModel, op: str
) -> None:
    """The documented limit of the stat-index mode, asserted (``_taken_for_the_commands``):
    the line the user appends while the command waits is in the command's recorded version,
    and a rewind to before the command takes it away, reported as restored (no conflict)."""
    model = no_sandbox
    _steps(
        model,
        lambda: model.agent_write(path="a.txt", read_first=False),
        lambda: model.agent_bash(concurrent=True, op=op, path="a.txt"),
    )
    assert model.sid is not None
    line = next(iter(model._user_lines("a.txt")))  # the model asserted it is the command's
    nodes = model._nodes()
    command_node = str(model.h.of(model.sid, "ToolCallCompleted")[-1].originator_version)
    before = nodes[nodes.index(command_node) - 1]
    result = model._branching().rewind(model.sid, before, conversation=False)
    outcome = {f.path: f.outcome for f in result.files}
    assert outcome.get("a.txt") == "restored", outcome
    assert line not in model._user_lines("a.txt")


@pytest.mark.parametrize("with_sandbox", [True, False], ids=["sandbox", "stat-index"])
def test_an_edit_after_a_checkout_to_before_a_command_keeps_the_checkouts_content(
    with_sandbox: bool, request: pytest.FixtureRequest
) -> None:
    """Shrunk from the 2,000-example run without the sandbox (and failing with it too): the
    agent's view of a file came from the whole log, so after a checkout to before the command
    that appended to it, the next edit (without a read) merged against the abandoned branch's
    content, took the checkout's own change for a user's edit, and recorded the appended line
    as the session's content although the disk (rightly) lacked it."""
    model = request.getfixturevalue("model" if with_sandbox else "no_sandbox")
    _steps(
        model,
        lambda: model.agent_write(path="b.txt", read_first=False),
        lambda: model.agent_bash(concurrent=False, op="append", path="b.txt"),
        lambda: model.checkout(index=2),
        lambda: model.agent_edit(k=0, path="b.txt", read_first=False),
    )
