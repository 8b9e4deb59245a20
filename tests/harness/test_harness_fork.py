"""Fork and rewind of a harness session's conversation (issue 32, item 2): the harness continues
from the node, its model request carrying the history up to that node and not after it
(Claude Code: its own ``--fork-session --resume-session-at``; the other CLIs: rebuilt by
replaying the recorded exchanges through the proxy)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_model import standard_script
from harness_helpers import HarnessEnv, make_env, sandbox_reason

KINDS = [
    "claude",
    pytest.param("codex", marks=pytest.mark.slow),
    pytest.param("gemini", marks=pytest.mark.slow),
]


@pytest.fixture
def henv(tmp_path: Path, harness_bin: Path) -> Iterator[HarnessEnv]:
    reason = sandbox_reason(tmp_path)
    if reason:
        pytest.skip(f"harness sessions need the namespace sandbox: {reason}")
    yield from make_env(tmp_path, harness_bin, standard_script(str(tmp_path / "ws")))


def two_turns(h: HarnessEnv, kind: str) -> tuple[str, list[dict[str, Any]]]:
    done = h.cli("run", "--harness", kind, "--yes", "--json", "FIRST-PROMPT-K1 write the notes")
    assert done.returncode == 0, done.stderr
    sid = next(u["session_id"] for u in h.json_lines(done.stdout) if u["type"] == "session")
    again = h.cli("run", "--session", sid, "--yes", "--json", "SECOND-PROMPT-K2")
    assert again.returncode == 0, again.stderr
    tree = json.loads(h.cli("tree", sid, "--json").stdout)
    return sid, tree["nodes"]


def first_request_after(h: HarnessEnv, before: int) -> str:
    """The first conversation request the harness made after ``before`` requests."""
    for r in h.model.requests[before:]:
        body = json.dumps(r.get("body"))
        if "THIRD-PROMPT-K3" in body:
            return body
    raise AssertionError("the harness never sent the new prompt")


@pytest.mark.parametrize("kind", KINDS)
def test_a_fork_at_the_first_turns_end_continues_with_its_history_only(
    kind: str, henv: HarnessEnv
) -> None:
    h = henv
    sid, nodes = two_turns(h, kind)
    first_answer = [n for n in nodes if n["kind"] == "assistant"][2]  # turn 1's final answer
    forked = h.cli("fork", sid, first_answer["id"], "--new-session", "--json")
    assert forked.returncode == 0, forked.stderr
    child = json.loads(forked.stdout)["session"]
    before = len(h.model.requests)
    done = h.cli("run", "--session", child, "--yes", "--json", "THIRD-PROMPT-K3")
    assert done.returncode == 0, done.stderr + done.stdout
    request = first_request_after(h, before)
    assert "FIRST-PROMPT-K1" in request and "FAKE-ANSWER-7Q" in request
    assert "SECOND-PROMPT-K2" not in request
    # the parent goes on where it was: its harness session is not the fork's
    before = len(h.model.requests)
    on = h.cli("run", "--session", sid, "--yes", "--json", "THIRD-PROMPT-K3 again")
    assert on.returncode == 0, on.stderr
    assert "SECOND-PROMPT-K2" in first_request_after(h, before)


def test_a_conversation_rewound_inside_a_turn_continues_from_that_node(henv: HarnessEnv) -> None:
    h = henv
    sid, nodes = two_turns(h, "claude")
    write_result = next(n for n in nodes if n["kind"] == "tool_result")  # the Write's result
    rewound = h.cli("rewind", sid, write_result["id"], "--conversation", "--json")
    assert rewound.returncode == 0, rewound.stderr
    before = len(h.model.requests)
    done = h.cli("run", "--session", sid, "--yes", "--json", "THIRD-PROMPT-K3")
    assert done.returncode == 0, done.stderr + done.stdout
    request = first_request_after(h, before)
    assert "FIRST-PROMPT-K1" in request and "notes.md" in request
    assert "echo made" not in request  # the shell call came after the node
    assert "SECOND-PROMPT-K2" not in request and "FAKE-ANSWER-7Q" not in request


def test_a_fork_of_a_configured_harness_runs_it_with_its_configured_env(
    henv: HarnessEnv,
) -> None:
    """A fork goes on with the harness as ``run --session`` continues one: the configured
    ``[harnesses.NAME]``, its ``env`` included (here Claude Code's output limit, which every
    request carries; the session records only the variable's name)."""
    h = henv
    config = h.home / ".config" / "coder-es" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(
        '[harnesses.mine]\nkind = "claude-code"\nenv = { CLAUDE_CODE_MAX_OUTPUT_TOKENS = "1234" }\n'
    )
    sid, nodes = two_turns(h, "mine")
    first_answer = [n for n in nodes if n["kind"] == "assistant"][2]
    forked = h.cli("fork", sid, first_answer["id"], "--new-session", "--json")
    assert forked.returncode == 0, forked.stderr
    child = json.loads(forked.stdout)["session"]
    before = len(h.model.requests)
    done = h.cli("run", "--session", child, "--yes", "--json", "THIRD-PROMPT-K3")
    assert done.returncode == 0, done.stderr + done.stdout
    assert "FIRST-PROMPT-K1" in first_request_after(h, before)
    asked = {
        r["body"].get("max_tokens")
        for r in h.model.requests[before:]
        if r.get("method") == "POST" and r["path"].split("?")[0].endswith("/messages")
    }
    assert asked == {1234}, asked
