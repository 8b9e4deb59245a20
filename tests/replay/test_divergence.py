"""Changing the code (or the recording) makes the replay fail at the right step, saying why."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from replay_helpers import bundled

from coder_es.agent import decider, prompt
from coder_es.tools.base import ToolContext, ToolResult
from coder_es.tools.files import ReadInput, ReadTool
from coder_es.tools.registry import ToolRegistry, default_registry
from replay.cassette import Cassette, RecordedEvent
from replay.engine import ReplayOptions, replay_cassette


def step_of(cassette: Cassette, kind: str, n: int = 0, **match: Any) -> int:
    found = [
        e.version
        for e in cassette.events
        if e.kind == kind and all(e.fields.get(k) == v for k, v in match.items())
    ]
    return found[n]


@pytest.mark.parametrize("mode", ["verify", "live"])
def test_a_changed_system_prompt_fails_at_the_first_model_call(
    monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    original = prompt.recorded_prompt

    def changed(*args: Any) -> str:
        return original(*args) + "\nAlways answer in French."

    monkeypatch.setattr(prompt, "recorded_prompt", changed)
    cassette = bundled("user-edit-merged")
    report = replay_cassette(cassette, ReplayOptions(mode=mode))
    d = report.divergence
    assert d is not None and d.what == "request" and d.kind == "ModelResponded"
    assert d.step == step_of(cassette, "ModelResponded")
    assert "at system" in d.summary
    assert "+  Always answer in French." in d.diff
    assert "step 3" in report.render() and "diff (recorded -> replayed)" in report.render()


class TerseRead(ReadTool):
    """A read tool whose output format changed: no line numbers."""

    async def run(self, args: ReadInput, ctx: ToolContext) -> ToolResult:
        result = await super().run(args, ctx)
        lines = [line.split("\t", 1)[-1] for line in result.output.split("\n")]
        return dataclasses.replace(result, output="\n".join(lines))


def test_a_changed_tool_output_format_fails_at_that_tool_result_in_live_mode() -> None:
    tools = ToolRegistry(
        [
            TerseRead() if t.name == "read" else t
            for t in (default_registry().get(n) for n in default_registry().names())
            if t is not None
        ]
    )
    cassette = bundled("fix-failing-test")
    report = replay_cassette(cassette, ReplayOptions(mode="live", tools=tools))
    d = report.divergence
    assert d is not None and d.what == "event" and d.kind == "ToolCallCompleted"
    assert d.step == step_of(cassette, "ToolCallCompleted", name="read")
    assert "fields.output differs" in d.summary
    assert '-  1\t"""Tiny arithmetic helpers."""' in d.diff
    assert '+  """Tiny arithmetic helpers."""' in d.diff
    # Verify mode serves tool results from the recording: the same change goes unnoticed.
    assert replay_cassette(cassette, ReplayOptions(mode="verify", tools=tools)).ok


@pytest.mark.parametrize("mode", ["verify", "live"])
def test_a_changed_tool_execution_order_fails_at_the_first_result(
    monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    original = decider.decide

    def reversed_runs(state: Any, ctx: Any) -> Any:
        action = original(state, ctx)
        if isinstance(action, decider.RunTools) and len(action.calls) > 1:
            return decider.RunTools(tuple(reversed(action.calls)), action.concurrent)
        return action

    monkeypatch.setattr(decider, "decide", reversed_runs)
    cassette = bundled("refactor-across-files")
    report = replay_cassette(cassette, ReplayOptions(mode=mode))
    d = report.divergence
    assert d is not None and d.what == "event"
    # The three reads ran in one batch; the first result recorded is now the last file's.
    first_read = step_of(cassette, "FileObserved")
    assert d.step == first_read and d.kind == "FileObserved"
    assert "shop/pricing.py" in str(d.expected) and "shop/report.py" in str(d.actual)
    assert (
        f"step {first_read} (FileObserved): fields.tool_use_id (and path, hash, size) differ: "
        "recorded 'toolu_scripted_1_1', replayed 'toolu_scripted_1_3'" in d.summary
    )


def _without_rules(cassette: Cassette) -> Cassette:
    started = cassette.events[0]
    settings = dict(started.fields["settings"])
    settings["permissions"] = {**settings["permissions"], "rules": []}
    fields = {**started.fields, "settings": settings}
    events = (dataclasses.replace(started, fields=fields), *cassette.events[1:])
    return dataclasses.replace(cassette, events=events)


def test_a_changed_permission_rule_fails_at_the_decision() -> None:
    cassette = bundled("denied-permission")
    # The recorded session denied `rm -rf out` by a rule; without the rule the preset allows it.
    report = replay_cassette(_without_rules(cassette), ReplayOptions(mode="verify"))
    d = report.divergence
    assert d is not None and d.kind == "PermissionDecided"
    assert d.step == step_of(cassette, "PermissionDecided", decision="deny")
    expected = (
        "fields.decision (and matched_rule, reason) differ: recorded 'deny', replayed 'allow'"
    )
    assert expected in d.summary


def test_a_changed_preset_asks_where_the_recording_decided_by_rule(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from coder_es.permissions import presets
    from coder_es.permissions.rules import Rule

    build = presets.get_preset("build")
    asking = dataclasses.replace(build, rules=(Rule("*", None, "ask", "preset:build"),))
    monkeypatch.setattr(presets, "get_preset", lambda name: asking if name == "build" else build)
    monkeypatch.setattr("coder_es.permissions.policy.get_preset", presets.get_preset)
    cassette = bundled("fix-failing-test")
    report = replay_cassette(cassette, ReplayOptions(mode="verify"))
    d = report.divergence
    assert d is not None and d.step == step_of(cassette, "PermissionDecided")
    assert "recording has PermissionDecided here, the current code records PermissionRequested" in (
        d.summary
    )


def test_a_recording_that_ends_early_reports_the_extra_model_call() -> None:
    cassette = bundled("fix-failing-test")
    cut = dataclasses.replace(cassette, events=cassette.events[:-1])
    report = replay_cassette(cut, ReplayOptions(mode="verify"))
    d = report.divergence
    assert d is not None and d.what == "model_call" and d.step == len(cassette.events)
    assert "makes model call 5; the recording has 4" in d.summary


def test_a_recording_that_goes_on_reports_the_missing_step() -> None:
    cassette = bundled("user-edit-merged")
    last = cassette.events[-1]
    extra = RecordedEvent(
        last.version + 1,
        "NodeLabelled",
        last.topic,
        last.timestamp,
        {"prev_hash": "", "node": "2", "name": "later"},
    )
    longer = dataclasses.replace(cassette, events=(*cassette.events, extra))
    # A label is a user command: it is replayed, so the streams stay identical.
    assert replay_cassette(longer, ReplayOptions(mode="verify")).ok
    bogus = RecordedEvent(
        last.version + 1, "ModelResponded", last.topic, last.timestamp, dict(last.fields)
    )
    report = replay_cassette(
        dataclasses.replace(cassette, events=(*cassette.events, bogus)), ReplayOptions()
    )
    d = report.divergence
    assert d is not None and d.what == "missing" and d.step == last.version + 1
    assert "the current code records nothing more here" in d.summary


def test_the_scratch_workspace_is_removed_unless_kept(tmp_path: Path) -> None:
    report = replay_cassette(
        bundled("branched-rewind"), ReplayOptions(mode="live", workspace=tmp_path / "w")
    )
    assert report.ok and (tmp_path / "w" / "greet.py").read_text().count("HELLO") == 1
