"""Issue 34: a question nobody is there to answer parks the turn (exit 3); ``coder-es approve``
/ ``deny`` answer it from another process, and ``run --session S`` continues the same turn."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cli_helpers import Cli, run_process

from coder_es.agent.request import expand_request
from coder_es.application import CoderApp
from coder_es.domain.session import Session
from coder_es.store.config import StoreConfig

EXIT_WAITING = 3


def _script(repo: Path, calls: list[dict[str, Any]], name: str = "turns.json") -> str:
    """One response with these tool calls, then a closing text."""
    blocks = [
        {"type": "tool_use", "id": c["id"], "name": c["name"], "input": c["input"]} for c in calls
    ]
    turns = [{"blocks": blocks}, {"blocks": [{"type": "text", "text": "all done"}]}]
    (repo / name).write_text(json.dumps({"turns": turns}))
    return str(repo / name)


def _answer_script(repo: Path) -> str:
    """A model that answers a new prompt with text."""
    turns = [{"blocks": [{"type": "text", "text": "on it"}]}]
    (repo / "answer.json").write_text(json.dumps({"turns": turns}))
    return str(repo / "answer.json")


def _app(repo: Path) -> CoderApp:
    import os

    return CoderApp(StoreConfig("sqlite", Path(os.environ["CODER_ES_STORE"])))


def _last_request_results(repo: Path, sid: str) -> dict[str, dict[str, Any]]:
    """The tool results the model's last request held, by tool_use_id."""
    app = _app(repo)
    try:
        from uuid import UUID

        events = app.session_events(UUID(sid))
        last = [e for e in events if isinstance(e, Session.ModelResponded)][-1]
        assert last.request_digest is not None
        request = expand_request(app.blobs.for_session(UUID(sid)), last.request_digest)
    finally:
        app.close()
    out = {}
    for message in request["messages"]:
        for block in message["content"] if isinstance(message["content"], list) else []:
            if block.get("type") == "tool_result":
                out[block["tool_use_id"]] = block
    return out


def _text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, list):
        return "".join(c.get("text", "") for c in content)
    return str(content)


def _kinds(cli: Cli, sid: str) -> list[str]:
    return [e["kind"] for e in cli("show", sid, "--json").json_lines()]


def test_deferred_write_approved_from_another_process_continues_the_same_turn(
    repo: Path, cli: Cli
) -> None:
    outside = repo.parent / "outside.txt"
    script = _script(
        repo, [{"id": "w1", "name": "write", "input": {"path": str(outside), "content": "hi\n"}}]
    )
    r = cli("run", "write outside", "--script", script, "--defer")
    assert r.code == EXIT_WAITING, r.err
    assert "coder-es approve" in r.err and "coder-es deny" in r.err
    assert not outside.exists()
    sid = cli("sessions", "--json").json_lines()[0]["id"]
    kinds = _kinds(cli, sid)
    assert kinds[-2:] == ["PermissionDeferred", "TurnParked"]

    listed = cli("pending", "--json").json_lines()
    assert [(q["session"], q["call"], q["tool"]) for q in listed] == [(sid, "w1", "write")]
    assert listed[0]["subject"] == str(outside)
    assert listed[0]["source"] == "run --defer"
    assert listed[0]["asked_by"]["client"] == "coder-es run"

    # The answer comes from another process.
    answered = run_process(["approve", sid[:8], "w1"], repo)
    assert answered.code == 0, answered.err
    assert cli("pending", "--json").json_lines() == []

    r = cli("run", "--session", sid[:8], "--script", script)
    assert r.code == 0, r.err
    assert outside.read_text() == "hi\n"
    assert "all done" in r.out
    kinds = _kinds(cli, sid)
    parked = kinds.index("TurnParked")
    # The same turn: no new user message between the wait and the result.
    assert "UserMessageAdded" not in kinds[parked:]
    assert kinds[parked + 1 : parked + 3] == ["DeferredAnswered", "PermissionDecided"]
    shown = cli("show", sid, "--json").json_lines()
    answer = next(e for e in shown if e["kind"] == "DeferredAnswered")
    assert answer["fields"]["by"]["client"] == "coder-es approve"
    assert answer["fields"]["by"]["pid"] > 0 and answer["fields"]["by"]["host"]
    results = _last_request_results(repo, sid)
    assert results["w1"].get("is_error") is not True
    assert outside.name in _text(results["w1"]) or _text(results["w1"])


def test_deny_with_a_message_reaches_the_model(repo: Path, cli: Cli) -> None:
    outside = repo.parent / "denied.txt"
    script = _script(
        repo, [{"id": "w1", "name": "write", "input": {"path": str(outside), "content": "x"}}]
    )
    assert cli("run", "go", "--script", script, "--defer").code == EXIT_WAITING
    sid = cli("sessions", "--json").json_lines()[0]["id"]
    d = cli("deny", sid, "--message", "not on a Friday")
    assert d.code == 0, d.err
    r = cli("run", "--session", sid, "--script", script)
    assert r.code == 0, r.err
    assert not outside.exists()
    results = _last_request_results(repo, sid)
    assert results["w1"]["is_error"] is True
    assert "not on a Friday" in _text(results["w1"])


def test_two_deferred_calls_answered_one_by_one_and_the_others_run(repo: Path, cli: Cli) -> None:
    a, b = repo.parent / "a.txt", repo.parent / "b.txt"
    script = _script(
        repo,
        [
            {"id": "c1", "name": "write", "input": {"path": str(a), "content": "A"}},
            {"id": "c2", "name": "read", "input": {"path": "notes.md"}},
            {"id": "c3", "name": "write", "input": {"path": str(b), "content": "B"}},
        ],
    )
    r = cli("run", "go", "--script", script, "--defer")
    assert r.code == EXIT_WAITING, r.err
    sid = cli("sessions", "--json").json_lines()[0]["id"]
    # The call that may run did (in call order); the two others park together.
    shown = cli("show", sid, "--json").json_lines()
    completed = [e["fields"]["tool_use_id"] for e in shown if e["kind"] == "ToolCallCompleted"]
    assert completed == ["c2"]
    parked = [e for e in shown if e["kind"] == "TurnParked"]
    assert [p["fields"]["tool_use_ids"] for p in parked] == [["c1", "c3"]]
    assert [q["call"] for q in cli("pending", "--json").json_lines()] == ["c1", "c3"]

    assert cli("approve", sid, "c1").code == 0
    # One answer of two: the turn still waits, and says so again.
    again = cli("run", "--session", sid, "--script", script)
    assert again.code == EXIT_WAITING, again.err
    assert a.read_text() == "A" and not b.exists()
    assert [q["call"] for q in cli("pending", "--json").json_lines()] == ["c3"]

    assert cli("deny", sid, "c3", "--message", "no b").code == 0
    done = cli("run", "--session", sid, "--script", script)
    assert done.code == 0, done.err
    assert not b.exists()
    results = _last_request_results(repo, sid)
    assert set(results) == {"c1", "c2", "c3"}
    assert "no b" in _text(results["c3"])


def test_answering_twice_or_a_call_not_waiting_is_one_clear_line(repo: Path, cli: Cli) -> None:
    outside = repo.parent / "twice.txt"
    script = _script(
        repo, [{"id": "w1", "name": "write", "input": {"path": str(outside), "content": "x"}}]
    )
    assert cli("run", "go", "--script", script, "--defer").code == EXIT_WAITING
    sid = cli("sessions", "--json").json_lines()[0]["id"]
    assert cli("approve", sid, "w1").code == 0
    twice = cli("deny", sid, "w1")
    assert twice.code == 2
    assert twice.err.count("\n") == 1 and "already answered" in twice.err
    assert "Traceback" not in twice.err
    unknown = cli("approve", sid, "nope")
    assert unknown.code == 2 and "not waiting" in unknown.err
    none_left = cli("approve", sid)
    assert none_left.code == 2 and "no question waiting" in none_left.err
    # Nothing was recorded by the refused answers.
    shown = cli("show", sid, "--json").json_lines()
    assert [e["kind"] for e in shown].count("PermissionDecided") == 1


def test_a_defer_rule_parks_even_an_interactive_answerer_and_approve_continue_runs_it(
    repo: Path, cli: Cli
) -> None:
    script = _script(repo, [{"id": "b1", "name": "bash", "input": {"command": "touch hi.txt"}}])
    r = cli("run", "go", "--script", script, "--defer", "bash:touch *", "--yes")
    assert r.code == EXIT_WAITING, r.err
    assert not (repo / "hi.txt").exists()
    sid = cli("sessions", "--json").json_lines()[0]["id"]
    listed = cli("pending", "--json").json_lines()
    assert listed[0]["source"] == "rule"
    assert listed[0]["matched_rule"] == "user:defer bash:touch *"
    cont = cli("approve", sid, "--continue", "--script", script)
    assert cont.code == 0, cont.err
    assert (repo / "hi.txt").exists()
    assert "all done" in cont.out


def test_without_defer_a_non_interactive_question_is_still_denied(repo: Path, cli: Cli) -> None:
    outside = repo.parent / "plain.txt"
    script = _script(
        repo, [{"id": "w1", "name": "write", "input": {"path": str(outside), "content": "x"}}]
    )
    r = cli("run", "go", "--script", script)
    assert r.code == 0, r.err
    assert "non-interactive" in r.err
    assert cli("pending", "--json").json_lines() == []


def test_an_answer_while_another_process_holds_the_session_records_nothing(
    repo: Path, cli: Cli
) -> None:
    outside = repo.parent / "busy.txt"
    script = _script(
        repo, [{"id": "w1", "name": "write", "input": {"path": str(outside), "content": "x"}}]
    )
    assert cli("run", "go", "--script", script, "--defer").code == EXIT_WAITING
    sid = cli("sessions", "--json").json_lines()[0]["id"]
    # Another process holds the session (a turn, or another answer): one writer per session.
    app = _app(repo)
    try:
        with app.leases.hold(sid, "a turn elsewhere"):
            busy = run_process(["approve", sid], repo)
    finally:
        app.close()
    assert busy.code != 0 and "Traceback" not in busy.err
    assert busy.err.count("\n") == 1
    assert "DeferredAnswered" not in _kinds(cli, sid)
    assert run_process(["approve", sid], repo).code == 0
    again = run_process(["approve", sid], repo)
    assert again.code == 2 and "no question waiting" in again.err
    kinds = _kinds(cli, sid)
    assert kinds.count("DeferredAnswered") == 1 and kinds.count("PermissionDecided") == 1


def test_a_new_prompt_on_a_parked_session_is_refused_until_the_turn_is_answered(
    repo: Path, cli: Cli
) -> None:
    """Rule 6: a new prompt would close the parked call unrun and drop the question (or an
    approval). It is refused in one line saying how to answer; nothing is recorded."""
    outside = repo.parent / "later.txt"
    script = _script(
        repo, [{"id": "w1", "name": "write", "input": {"path": str(outside), "content": "hi\n"}}]
    )
    assert cli("run", "write it", "--script", script, "--defer").code == EXIT_WAITING
    sid = cli("sessions", "--json").json_lines()[0]["id"]
    before = _kinds(cli, sid)
    chat = _answer_script(repo)

    r = cli("run", "something else", "--session", sid[:8], "--script", chat)
    assert r.code == 2, r.err
    lines = [line for line in r.err.splitlines() if "waits for answers" in line]
    assert len(lines) == 1, r.err
    assert "coder-es approve" in lines[0] and "coder-es deny" in lines[0] and "w1" in lines[0]
    assert "Traceback" not in r.err
    assert _kinds(cli, sid) == before
    assert [q["call"] for q in cli("pending", "--json").json_lines()] == ["w1"]

    # Approved but not run yet: the approval would be lost just the same.
    assert run_process(["approve", sid[:8]], repo).code == 0
    r = cli("run", "something else", "--session", sid[:8], "--script", chat)
    assert r.code == 2, r.err
    assert "continue the turn first" in r.err and f"coder-es run --session {sid}" in r.err
    assert not outside.exists()
    # Continued: the approved write runs; then the new prompt is a turn of its own.
    assert cli("run", "--session", sid[:8], "--script", script).code == 0
    assert outside.read_text() == "hi\n"
    r = cli("run", "something else", "--session", sid[:8], "--script", chat)
    assert r.code == 0, r.err


def test_denying_the_parked_call_is_how_a_new_prompt_drops_it(repo: Path, cli: Cli) -> None:
    """The explicit way to drop a parked turn: deny its calls (with a message); the new prompt
    then goes ahead, and the model reads the denial as the call's result, not "not run"."""
    outside = repo.parent / "dropped.txt"
    script = _script(
        repo, [{"id": "w1", "name": "write", "input": {"path": str(outside), "content": "x"}}]
    )
    assert cli("run", "go", "--script", script, "--defer").code == EXIT_WAITING
    sid = cli("sessions", "--json").json_lines()[0]["id"]
    assert cli("deny", sid, "--message", "do something else instead").code == 0
    chat = _answer_script(repo)
    r = cli("run", "something else", "--session", sid, "--script", chat)
    assert r.code == 0, r.err
    assert not outside.exists()
    results = _last_request_results(repo, sid)
    assert results["w1"]["is_error"] is True
    assert "do something else instead" in _text(results["w1"])


def test_chat_on_a_parked_session_says_it_waits_and_goes_on(repo: Path, cli: Cli) -> None:
    """The same refusal in a chat: one line per message, the chat goes on (its commands still
    work), nothing recorded."""
    import subprocess
    import sys

    from cli_helpers import subprocess_env

    outside = repo.parent / "chat.txt"
    script = _script(
        repo, [{"id": "w1", "name": "write", "input": {"path": str(outside), "content": "x"}}]
    )
    assert cli("run", "go", "--script", script, "--defer").code == EXIT_WAITING
    sid = cli("sessions", "--json").json_lines()[0]["id"]
    before = _kinds(cli, sid)
    chat = ["chat", "--session", sid, "--script", _answer_script(repo)]
    done = subprocess.run(
        [sys.executable, "-m", "coder_es.cli.main", *chat],
        cwd=repo,
        env=subprocess_env(),
        input="something else\n/help\nand this?\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("waits for answers to its parked turn") == 2, done.stderr
    assert "/exit" in done.stderr and "Traceback" not in done.stderr  # /help answered between
    after = _kinds(cli, sid)
    # Only what opening the chat records (its model, another script): no message, no result.
    assert after[: len(before)] == before and set(after[len(before) :]) <= {"SettingsChanged"}
