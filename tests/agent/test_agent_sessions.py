"""Whole sessions: scripted model, real tools, real git repository, a real store.

The tests that save, reload or resume a session run on every backend (``ON_EVERY_BACKEND``);
the rest exercise the loop's logic and run on SQLite only.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from agent_helpers import (
    ON_EVERY_BACKEND,
    Harness,
    collect,
    plan_commands_are_read_only,
    text,
    tool,
    turn,
)
from processes import gone

from coder_es.agent import updates as up
from coder_es.agent.decider import INTERRUPTED_BY_CANCEL
from coder_es.agent.request import expand_request
from coder_es.fleet.summary import rebuild
from coder_es.permissions.policy import PermissionAnswer
from coder_es.permissions.rules import parse_rule
from coder_es.providers.types import canonical_request
from coder_es.service.api import SessionHandle


@ON_EVERY_BACKEND
def test_an_edit_session_records_every_step_in_order(h: Harness) -> None:
    handle = h.start(
        [
            turn(text("Looking."), tool("read", path="src/calc.py")),
            turn(
                tool(
                    "edit",
                    path="src/calc.py",
                    old_string="return a - b\n\n\n",
                    new_string="return a + b\n\n\n",
                )
            ),
            turn(text("Fixed add.")),
        ]
    )
    updates = collect(handle, "fix add")
    assert isinstance(updates[0], up.SessionOpened) and updates[0].session_id == handle.id
    assert isinstance(updates[-1], up.TurnEnded) and updates[-1].reason == "end_turn"
    assert (h.root / "src/calc.py").read_text().startswith("def add(a, b):\n    return a + b\n")
    assert h.kinds(handle) == [
        "Started",
        "UserMessageAdded",
        "ModelResponded",
        "ToolCallRequested",
        "PermissionDecided",
        "FileObserved",
        "ToolCallCompleted",
        "ModelResponded",
        "ToolCallRequested",
        "PermissionDecided",
        "EditApplied",
        "ToolCallCompleted",
        "ModelResponded",
    ]
    edit_done = h.of(handle, "ToolCallCompleted")[1]
    assert edit_done.files_changed[0]["path"] == "src/calc.py" and not edit_done.is_error
    # Each recorded request digest expands to exactly what the provider was sent.
    sent = h.providers[0].requests
    digests = [e.request_digest for e in h.of(handle, "ModelResponded")]
    assert [expand_request(h.app.blobs, d) for d in digests] == [canonical_request(r) for r in sent]
    # The instructions and git status that went into the prompt are recorded with the session.
    settings = h.events(handle)[0].settings
    assert settings["instruction_files"] == ["AGENTS.md"]
    assert "Run the tests with pytest." in sent[0].system
    assert sent[0].system == h.app.blobs.get(settings["system_blob"]).decode()


@ON_EVERY_BACKEND
def test_a_user_edit_during_the_run_is_merged_not_lost(h: Harness) -> None:
    async def user_edits_while_model_thinks(_seconds: float) -> None:
        path = h.root / "src/calc.py"
        path.write_text(path.read_text() + "\n\ndef mul(a, b):\n    return a * b\n")

    h.sleep = user_edits_while_model_thinks
    handle = h.start(
        [
            turn(tool("read", path="src/calc.py")),
            turn(
                tool(
                    "edit",
                    path="src/calc.py",
                    old_string="def add(a, b):\n    return a - b",
                    new_string="def add(a, b):\n    return a + b",
                ),
                delay_ms=1,
            ),
            turn(text("done")),
        ]
    )
    collect(handle, "fix add")
    content = (h.root / "src/calc.py").read_text()
    assert "return a + b" in content and "def mul(a, b):" in content
    applied = h.of(handle, "EditApplied")[0]
    assert applied.outcome == "merged"
    result = h.of(handle, "ToolCallCompleted")[1]
    assert "merged" in result.output and not result.is_error


@ON_EVERY_BACKEND
def test_shell_commands_run_and_their_file_changes_are_recorded(h: Harness) -> None:
    handle = h.start(
        [
            turn(tool("bash", command="echo 'x = 1' > gen.py && git status --short")),
            turn(text("ok")),
        ]
    )
    collect(handle, "generate")
    done = h.of(handle, "ToolCallCompleted")[0]
    assert "?? gen.py" in done.output and "[exit code 0]" in done.output
    assert [c["path"] for c in done.files_changed] == ["gen.py"]
    assert done.files_changed[0]["before"] is None


@ON_EVERY_BACKEND
def test_a_denied_call_gets_an_error_result_and_the_model_continues(h: Harness) -> None:
    handle = h.start(
        [
            turn(
                tool("read", path="secrets/key.txt"),
                tool("write", path="secrets/key.txt", content="leaked"),
            ),
            turn(text("I could not touch the secrets.")),
        ],
        rules=[parse_rule("write:secrets/**", "deny")],
    )
    updates = collect(handle, "mess with secrets")
    assert (h.root / "secrets/key.txt").read_text() == "hunter2\n"
    decided = h.of(handle, "PermissionDecided")
    assert [(d.tool, d.decision, d.decided_by, d.matched_rule) for d in decided] == [
        ("read", "allow", "rule", "preset:build:allow *"),
        ("write", "deny", "rule", "user:deny write:secrets/**"),
    ]
    results = h.of(handle, "ToolCallCompleted")
    assert results[1].is_error and results[1].output.startswith("Permission denied: denied by user")
    # The second request carried both results back to the model, in the order it asked.
    last = h.providers[0].requests[1].messages[-1]["content"]
    assert [b["tool_use_id"] for b in last] == [d.tool_use_id for d in decided]
    assert updates[-1].reason == "end_turn"  # type: ignore[attr-defined]


@ON_EVERY_BACKEND
def test_asked_permissions_are_answered_by_the_client_and_always_sticks(h: Harness) -> None:
    handle = h.start(
        [
            turn(tool("bash", command="rm -f README.md")),
            turn(tool("bash", command="rm -f src/calc.py")),
            turn(text("removed")),
        ],
        agent="plan",
    )
    questions: list[up.PermissionRequired] = []

    async def answer(hd: SessionHandle, update: up.Update) -> None:
        if isinstance(update, up.PermissionRequired):
            questions.append(update)
            await hd.answer(update.tool_use_id, PermissionAnswer.allow_always(decided_by="client"))

    collect(handle, "clean up", yes=None, on_update=answer)
    assert [q.subject for q in questions] == ["rm -f README.md"]  # the second was covered
    assert questions[0].matched_rule == "preset:plan:ask bash"
    decided = h.of(handle, "PermissionDecided")
    assert [(d.decision, d.scope, d.pattern, d.decided_by) for d in decided] == [
        ("allow", "always", "rm *", "client"),
        ("allow", "once", None, "rule"),
    ]
    assert decided[1].matched_rule == "always:allow bash:rm *"
    assert len(h.of(handle, "PermissionRequested")) == 1
    # Allowed, yet the plan agent's commands cannot write where the sandbox runs.
    removed = not plan_commands_are_read_only(h.root)
    assert (h.root / "README.md").exists() != removed
    assert (h.root / "src/calc.py").exists() != removed
    assert h.app.get_session(handle.id).always == [
        {"tool": "bash", "pattern": "rm *", "decision": "allow"}
    ]


def test_a_non_interactive_run_rejects_asks_with_a_recorded_reason(h: Harness) -> None:
    handle = h.start(
        [turn(tool("bash", command="rm -f README.md")), turn(text("could not"))], agent="plan"
    )
    collect(handle, "clean up", yes=False)
    assert (h.root / "README.md").exists()
    decided = h.of(handle, "PermissionDecided")[0]
    assert decided.decision == "deny" and "non-interactive" in decided.reason
    assert "--allow 'bash:rm *'" in decided.reason
    assert "non-interactive" in h.of(handle, "ToolCallCompleted")[0].output


def test_doom_loops_ask(h: Harness) -> None:
    same = tool("bash", command="ls")
    handle = h.start([turn(same), turn(same), turn(same), turn(text("stuck"))])
    collect(handle, "loop", yes=False)
    decided = h.of(handle, "PermissionDecided")
    assert [d.decision for d in decided] == ["allow", "allow", "deny"]
    assert decided[2].matched_rule == "doom_loop"


def test_unknown_tools_bad_arguments_and_step_limits(h: Harness) -> None:
    handle = h.start(
        [
            turn(tool("teleport", where="mars"), tool("read", file="x")),
            turn(tool("read", path="README.md")),
            turn(tool("read", path="README.md")),
        ],
        max_steps=2,
    )
    updates = collect(handle, "go")
    results = h.of(handle, "ToolCallCompleted")
    assert results[0].is_error and results[0].output.startswith("Unknown tool 'teleport'")
    assert results[1].is_error and "Invalid arguments for read" in results[1].output
    assert not results[2].is_error
    assert updates[-1].reason == "max_steps"  # type: ignore[attr-defined]
    assert h.providers[0].remaining == 1
    # The stop is an event (fleet summaries, audits and replays see it), recorded once: a
    # resume that finds the limit still reached does not repeat it.
    stops = h.of(handle, "StepLimitReached")
    assert [(e.steps, e.node) for e in stops] == [(2, handle.loop.state.head)]
    assert h.kinds(handle)[-1] == "StepLimitReached"
    again = collect(handle, None)
    assert again[-1].reason == "max_steps"  # type: ignore[attr-defined]
    assert len(h.of(handle, "StepLimitReached")) == 1
    # The fleet's sessions summary no longer shows such a session as running forever.
    assert rebuild(h.events(handle))[str(handle.loop.session.id)].status == "stopped"


def test_read_only_calls_run_concurrently_results_in_block_order(h: Harness) -> None:
    handle = h.start(
        [
            turn(
                tool("read", path="README.md"),
                tool("grep", pattern="def"),
                tool("find", pattern="*.py"),
                tool("bash", command="echo after"),
            ),
            turn(text("done")),
        ]
    )
    updates = collect(handle, "look")
    order = [
        (type(u).__name__, u.name)
        for u in updates
        if isinstance(u, up.ToolStarted | up.ToolCompleted)
    ]
    assert order[:3] == [("ToolStarted", "read"), ("ToolStarted", "grep"), ("ToolStarted", "find")]
    assert order[-2:] == [("ToolStarted", "bash"), ("ToolCompleted", "bash")]
    assert [e.name for e in h.of(handle, "ToolCallCompleted")] == ["read", "grep", "find", "bash"]


def test_provider_errors_are_recorded_and_end_the_turn(h: Harness) -> None:
    handle = h.start([{"error": {"type": "invalid_request_error", "message": "bad model"}}])
    updates = collect(handle, "hi")
    err = h.of(handle, "ErrorRecorded")[0]
    assert err.kind == "InvalidRequestError" and "bad model" in err.message and not err.retryable
    assert updates[-1].reason == "error"  # type: ignore[attr-defined]
    assert any(isinstance(u, up.Error) for u in updates)


@ON_EVERY_BACKEND
def test_cancelling_mid_tool_kills_the_command_and_leaves_the_session_resumable(
    h: Harness, tmp_path: Path
) -> None:
    started = tmp_path / "started"
    marker = f"sleep 30.{os.getpid()}7"
    handle = h.start([turn(tool("bash", command=f"{marker} & touch {started}; wait"))])

    async def cancel_when_running(hd: SessionHandle, update: up.Update) -> None:
        if isinstance(update, up.ToolStarted):
            while not started.exists():
                await asyncio.sleep(0.02)
            hd.cancel("user pressed Ctrl-C")

    began = time.monotonic()
    updates = collect(handle, "wait forever", on_update=cancel_when_running)
    # Ctrl-C stops the command at once, even if it lands while the shell is still starting.
    assert time.monotonic() - began < 10
    assert gone(marker)
    assert [type(u).__name__ for u in updates[-3:]] == [
        "ToolCompleted",
        "TurnCancelled",
        "TurnEnded",
    ]
    cancelled = h.of(handle, "TurnCancelled")[0]
    call_id = h.of(handle, "ToolCallRequested")[0].tool_use_id
    assert cancelled.reason == "user pressed Ctrl-C" and cancelled.tool_use_ids == [call_id]
    result = h.of(handle, "ToolCallCompleted")[0]
    assert result.is_error and result.output == INTERRUPTED_BY_CANCEL

    again = h.reopen(handle.id, [turn(text("Resumed."))])
    updates = collect(again, "carry on")
    assert updates[-1].reason == "end_turn"  # type: ignore[attr-defined]
    sent = h.providers[-1].requests[0].messages
    assert sent[-1]["content"][0]["content"] == INTERRUPTED_BY_CANCEL
    assert sent[-1]["content"][-1] == {"type": "text", "text": "carry on"}


def test_calls_on_branches_rewound_away_do_not_count_as_repeats(h: Harness) -> None:
    # Issue 18.2: three rewind + retry cycles of an identical bash call were refused as
    # "made 3 times in a row"; only the calls on the current path count.
    from coder_es.branching import Branching

    same = tool("bash", command="ls")
    handle = h.start([turn(same), turn(text("done"))])
    collect(handle, "list the files", yes=False)
    sid = handle.id
    user_node = str(h.of(sid, "UserMessageAdded")[0].originator_version)
    for _ in range(3):
        Branching(h.app, h.root).rewind(sid, user_node)
        retry = h.reopen(sid, [turn(same), turn(text("done"))])
        collect(retry, None, yes=False)
    decided = h.of(sid, "PermissionDecided")
    allowed = ("allow", "preset:build:allow *")
    assert [(d.decision, d.matched_rule) for d in decided] == [allowed] * 4
    # On one path the guard still asks (a non-interactive run rejects the ask).
    looping = h.reopen(sid, [turn(same), turn(same), turn(same), turn(text("stuck"))])
    collect(looping, "again", yes=False)
    assert h.of(sid, "PermissionDecided")[-1].matched_rule == "doom_loop"
