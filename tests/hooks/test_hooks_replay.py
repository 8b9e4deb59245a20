"""Hook runs in replay: verify serves the recorded runs without running a hook; live runs them
again and reports a divergence when a hook now decides differently."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_helpers import Harness, collect, text, tool, turn
from hook_helpers import FORMATTER, PROMPT_CONTEXT, STOP_ONCE, VALIDATOR, claude, script, start

from coder_es.hooks.spec import HookSpec
from replay.cassette import Cassette, dumps, export_session, loads
from replay.engine import ReplayOptions, replay_cassette

# Decides by the environment it runs in: a replay in another environment decides otherwise.
MOODY = 'if [ "$HOOK_MOOD" = grumpy ]; then echo "not today" >&2; exit 2; fi; exit 0'


def recorded(h: Harness, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Cassette]:
    monkeypatch.delenv("HOOK_MOOD", raising=False)
    (h.root / "keep").mkdir()
    (h.root / "keep" / "a.txt").write_text("precious\n")
    hooks = [
        claude("UserPromptSubmit", script(h.root, "context.py", PROMPT_CONTEXT)),
        claude("PreToolUse", script(h.root, "validate.py", VALIDATOR), "Bash", index=0),
        HookSpec("PreToolUse", MOODY, "bash", index=1),
        claude("PostToolUse", FORMATTER, "Edit|Write"),
        claude("Stop", script(h.root, "stop.py", STOP_ONCE)),
    ]
    handle = start(
        h,
        [
            turn(tool("bash", command="rm -rf keep")),
            turn(tool("bash", command="echo fine")),
            turn(tool("write", path="src/new.py", content="x = 1   \n")),
            turn(text("done")),
            turn(text("tests pass")),
        ],
        hooks,
    )
    collect(handle, "tidy up")
    assert (h.root / "src" / "new.py").read_text() == "x = 1\n"
    return handle.id, loads(dumps(export_session(h.app, handle.id)), "hooks")


def test_verify_serves_the_recorded_hook_runs(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    _sid, cassette = recorded(h, monkeypatch)
    assert sum(e.kind == "HookRan" for e in cassette.events) == 8
    # Nothing a hook would decide now matters in verify mode: no hook runs.
    monkeypatch.setenv("HOOK_MOOD", "grumpy")
    report = replay_cassette(cassette, ReplayOptions(mode="verify"))
    assert report.ok, report.divergence


def test_live_runs_the_hooks_again_and_names_a_changed_decision(
    h: Harness, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Commands written in the configuration: a live replay runs them in its scratch workspace
    # (scripts of the project are not in a cassette).
    monkeypatch.delenv("HOOK_MOOD", raising=False)
    hooks = [HookSpec("PreToolUse", MOODY, "bash"), claude("PostToolUse", FORMATTER, "Write")]
    handle = start(
        h,
        [
            turn(tool("bash", command="echo fine")),
            turn(tool("write", path="src/new.py", content="x = 1   \n")),
            turn(text("done")),
        ],
        hooks,
    )
    collect(handle, "tidy up")
    cassette = loads(dumps(export_session(h.app, handle.id)), "live")
    same = replay_cassette(cassette, ReplayOptions(mode="live", workspace=tmp_path / "a"))
    assert same.ok, same.divergence
    monkeypatch.setenv("HOOK_MOOD", "grumpy")
    report = replay_cassette(cassette, ReplayOptions(mode="live", workspace=tmp_path / "b"))
    assert not report.ok
    d = report.divergence
    assert d is not None and d.kind == "HookRan"
    assert "exit_code" in d.summary or "effect" in d.summary or "output" in d.summary


BLOCK_SECRETS = (
    "jq -r .prompt | grep -q 'sk-' && { echo 'a key in the prompt: not sent' >&2; exit 2; }; exit 0"
)


def test_a_blocked_prompt_never_reaches_the_model_and_replays(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    hooks = [claude("UserPromptSubmit", BLOCK_SECRETS)]
    handle = start(h, [turn(text("hello"))], hooks)
    updates = collect(handle, "use sk-abc123")
    assert h.of(handle, "UserMessageAdded") == []
    assert h.providers[-1].requests == []
    assert updates[-1].reason == "blocked"  # type: ignore[attr-defined]
    (ran,) = h.of(handle, "HookRan")
    assert ran.exit_code == 2 and ran.effect["blocked"]
    collect(handle, "say hello")
    assert len(h.of(handle, "UserMessageAdded")) == 1
    cassette = loads(dumps(export_session(h.app, handle.id)), "blocked")
    report = replay_cassette(cassette, ReplayOptions(mode="verify"))
    assert report.ok, report.divergence
