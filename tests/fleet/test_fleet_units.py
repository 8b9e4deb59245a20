"""Jobs, the step-keyed script and the summary fold: no database needed."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from coder_es.fleet.jobs import SessionJob
from coder_es.fleet.script import fleet_provider_factory
from coder_es.fleet.summary import fold, rebuild
from coder_es.providers.errors import ProviderConfigError, ScriptExhaustedError
from coder_es.providers.scripted import ScriptedProvider
from coder_es.providers.types import ModelRequest, ToolCallComplete
from coder_es.store.postgres_only import FleetUsageError, require_postgres

SID = "5f0c8a52-9d1e-4a56-8e0b-0a6f2d1c3b4e"


def test_job_round_trips_through_json_args() -> None:
    job = SessionJob(SID, prompt="fix it", yes=True, rules=(("allow", "bash:git *"),))
    assert SessionJob.from_args(job.to_args()) == job
    assert job.lock == f"session:{SID}"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"session_id": "nope"}, "not a UUID"),
        ({}, "session_id is missing"),
        ({"session_id": SID, "prompt": "  "}, "prompt is empty"),
        ({"session_id": SID, "max_steps": 0}, "max_steps"),
        ({"session_id": SID, "max_steps": "3"}, "max_steps must be an integer"),
        ({"session_id": SID, "rules": [["maybe", "bash"]]}, "not allow, schedule, defer or deny"),
        ({"session_id": SID, "rules": "bash"}, "rules must be a list"),
        ({"session_id": SID, "colour": "red"}, "unknown fields"),
        ({"session_id": SID, "yes": "yes"}, "true or false"),
    ],
)
def test_malformed_jobs_are_refused_naming_the_field(args: dict[str, Any], message: str) -> None:
    with pytest.raises(FleetUsageError, match=message):
        SessionJob.from_args(args)


def test_the_fleet_refuses_other_backends_with_a_hint() -> None:
    with pytest.raises(FleetUsageError, match=r"needs the postgres backend.*--backend postgres"):
        require_postgres("lmdb", "coder-es worker")


def _request(assistant_messages: int) -> ModelRequest:
    messages: list[Any] = [{"role": "user", "content": [{"type": "text", "text": "go"}]}]
    for _ in range(assistant_messages):
        messages += [
            {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
            {"role": "user", "content": [{"type": "text", "text": "more"}]},
        ]
    return ModelRequest(model="m", messages=messages)


async def _events(provider: ScriptedProvider, request: ModelRequest) -> list[Any]:
    return [e async for e in provider.stream(request)]


def test_step_script_answers_by_the_conversation_not_by_request_count() -> None:
    turns: list[dict[str, Any]] = [
        {"blocks": [{"type": "tool_use", "name": "bash", "input": {"command": "echo a"}}]},
        {"blocks": [{"type": "tool_use", "name": "bash", "input": {"command": "echo b"}}]},
        {"blocks": [{"type": "text", "text": "done"}]},
    ]
    provider = ScriptedProvider(turns, by_step=True)
    # A fresh provider (a worker that took over) asked at step 1 plays turn 1, twice if asked twice.
    for _ in range(2):
        events = asyncio.run(_events(provider, _request(1)))
        calls = [e for e in events if isinstance(e, ToolCallComplete)]
        assert [(c.id, c.input["command"]) for c in calls] == [("toolu_step1_0", "echo b")]
    events = asyncio.run(_events(provider, _request(0)))
    first = [e for e in events if isinstance(e, ToolCallComplete)]
    assert first[0].id == "toolu_step0_0"
    with pytest.raises(ScriptExhaustedError, match="already has 3 model response"):
        asyncio.run(_events(provider, _request(3)))


def test_fleet_provider_factory_needs_a_script(tmp_path: Path) -> None:
    factory = fleet_provider_factory(env={})
    with pytest.raises(ProviderConfigError, match="needs its script"):
        factory("scripted", "scripted")


def _event(kind: str, version: int, **fields: Any) -> Any:
    event_type = type(kind, (), {})
    event = event_type()
    event.__dict__.update(
        originator_id=SID, originator_version=version, timestamp=datetime.now(UTC), **fields
    )
    return event


def test_summary_fold_tracks_status_and_counts() -> None:
    events = [
        _event("Started", 1, title="t", workspace="/w"),
        _event("UserMessageAdded", 2),
        _event("ModelResponded", 3, stop_reason="tool_use"),
        _event("PermissionRequested", 4),
        _event("PermissionDecided", 5),
        _event("ToolCallCompleted", 6, is_error=True),
        _event("ErrorRecorded", 7, retryable=True),
        _event("ModelResponded", 8, stop_reason="end_turn"),
    ]
    statuses = []
    row = None
    for e in events:
        row = fold(row, e)
        statuses.append(row.status)
    assert statuses == [
        "new",
        "running",
        "running",
        "waiting",
        "running",
        "running",
        "running",
        "complete",
    ]
    assert row is not None
    assert (row.events, row.model_turns, row.tool_calls, row.tool_errors) == (8, 2, 1, 1)
    assert row.last_version == 8 and row.title == "t"
    assert rebuild(events) == {SID: row}
