"""The pieces under the servers: message validation, server-side approval rules, config choice."""

from __future__ import annotations

from pathlib import Path

import pytest

from coder_es.agent.updates import PermissionRequired
from coder_es.clients.acp_agent import answer_for, permission_options
from coder_es.clients.errors import ClientError
from coder_es.clients.filters import ApprovalFilter
from coder_es.clients.runtime import choose_provider
from coder_es.clients.ws_protocol import decision_answer, parse_client_message
from coder_es.config import RuleConfig, load_config
from coder_es.errors import UsageError


def question(tool: str, subject: str) -> PermissionRequired:
    return PermissionRequired("t1", tool, subject, {}, "default:ask", "no rule", "**")


def test_bad_messages_are_refused_with_the_reason() -> None:
    with pytest.raises(ClientError, match="JSON object"):
        parse_client_message("[1, 2]")
    with pytest.raises(ClientError, match="unknown message type 'shout'"):
        parse_client_message('{"type": "shout"}')
    with pytest.raises(ClientError, match="non-empty string 'text'"):
        parse_client_message('{"type": "send_message", "text": "  "}')
    with pytest.raises(ClientError, match="'decision' must be"):
        parse_client_message('{"type": "tool_decision", "tool_use_id": "x", "decision": "maybe"}')
    with pytest.raises(ClientError, match="conversation, the files, or both"):
        parse_client_message(
            '{"type": "rewind", "node": "3", "conversation": false, "files": false}'
        )


def test_client_decisions_are_recorded_as_the_clients() -> None:
    m = parse_client_message(
        '{"type": "tool_decision", "id": 4, "tool_use_id": "x", "decision": "allow",'
        ' "scope": "always", "pattern": "src/**"}'
    )
    answer = decision_answer(m)
    assert m.id == 4
    assert (answer.decision, answer.scope, answer.pattern, answer.decided_by) == (
        "allow",
        "always",
        "src/**",
        "client",
    )
    deny = decision_answer(
        parse_client_message('{"type": "tool_decision", "tool_use_id": "x", "decision": "deny"}')
    )
    assert deny.reason == "rejected by the user"


def test_acp_options_map_to_permission_answers() -> None:
    q = question("edit", "src/a.py")
    kinds = [o.kind for o in permission_options(q)]
    assert kinds == ["allow_once", "allow_always", "reject_once", "reject_always"]
    got = {k: answer_for(k, q) for k in kinds}
    assert [(a.decision, a.scope, a.decided_by) for a in got.values()] == [
        ("allow", "once", "client"),
        ("allow", "always", "client"),
        ("deny", "once", "client"),
        ("deny", "always", "client"),
    ]
    assert got["allow_always"].pattern == "**" and got["reject_always"].pattern == "**"


def test_server_rules_answer_before_the_client() -> None:
    rules = ApprovalFilter.from_config(
        [
            RuleConfig("read", "*", "allow"),
            RuleConfig("bash", "git *", "allow"),
            RuleConfig("bash", "git push *", "deny"),
        ]
    )

    def decision(tool: str, subject: str) -> str | None:
        answer = rules.decide(question(tool, subject))
        return None if answer is None else f"{answer.decision} by {answer.decided_by}"

    assert decision("read", "src/deep/file.py") == "allow by rule"
    assert decision("bash", "git status") == "allow by rule"
    assert decision("bash", "git push origin") == "deny by rule"
    # Every part of a command line must be allowed; one unmatched part asks the client.
    assert rules.decide(question("bash", "git status && rm -rf x")) is None
    assert rules.decide(question("bash", "git log $(rm -rf x)")) is None
    assert rules.decide(question("write", "a.txt")) is None
    assert ApprovalFilter().decide(question("read", "a")) is None


def test_provider_choice(tmp_path: Path) -> None:
    config = load_config(tmp_path, {"HOME": str(tmp_path)})
    script = tmp_path / "s.json"
    script.write_text('{"turns": []}')
    assert choose_provider(config, script=str(script), environ={}).provider == "scripted"
    env = {"CODER_ES_SCRIPT": str(script)}
    assert choose_provider(config, environ=env).provider == "scripted"
    assert choose_provider(config, provider="ollama", model="llama3", environ=env).model == "llama3"
    with pytest.raises(UsageError, match="no such file"):
        choose_provider(config, script=str(tmp_path / "missing.json"))
