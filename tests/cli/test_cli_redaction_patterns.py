"""Issue 28, point 5: a user's redaction patterns are compiled with RE2 (linear time, whatever
the pattern) and apply to content only, never to ids, paths of the event model, agent or
provider names."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from cli_helpers import Cli, run_process, script, text, tool, turn

from coder_es.redaction import RedactionConfigError, Redactor


def _user_config(text: str) -> Path:
    path = Path(os.environ["XDG_CONFIG_HOME"]) / "coder-es" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_backtracking_pattern_does_not_hang_a_turn(repo: Path, tmp_path: Path) -> None:
    # Python's re takes exponential time on this pattern and a line of 40 "x": the turn that
    # read such a file never ended.
    _user_config("[redaction]\npatterns = ['(x+x+)+y']\n")
    (repo / "xs.txt").write_text("x" * 40 + "\n")
    s = script(tmp_path / "s.json", turn(tool("read", path="xs.txt")), turn(text("read it")))
    started = time.monotonic()
    try:
        r = run_process(
            ["--workspace", str(repo), "run", "look", "--script", s, "--json"],
            repo,
            PYTHONHASHSEED="0",
        )
    except Exception as e:  # subprocess.TimeoutExpired on a backtracking engine
        pytest.fail(f"the turn did not end: {e}")
    assert r.code == 0, r.err
    assert time.monotonic() - started < 100
    done = [u for u in map(json.loads, r.out.splitlines()) if u["type"] == "tool_completed"]
    assert "x" * 40 in done[0]["output"]  # no match: nothing redacted


def test_a_pattern_matching_everything_leaves_ids_and_names_alone(
    cli: Cli, repo: Path, tmp_path: Path
) -> None:
    _user_config("[redaction]\npatterns = ['[\\s\\S]+']\n")
    s = script(
        tmp_path / "s.json", turn(text("reading"), tool("read", path="notes.md")), turn(text("ok"))
    )
    r, sid = cli.run_script("secret plans", s)
    assert r.code == 0, r.err
    tree = cli("tree", sid)
    assert tree.code == 0, tree.out + tree.err
    assert "Traceback" not in tree.err
    events = cli("show", sid, "--json").json_lines()
    started = events[0]["fields"]
    assert (started["agent"], started["provider"]) == ("build", "scripted")
    assert started["workspace"] == str(repo)
    assert started["title"].startswith("[REDACTED:user:config1:")
    by_kind: dict[str, list[dict]] = {}
    for e in events:
        by_kind.setdefault(e["kind"], []).append(e["fields"])
    # Content is what the user asked to redact...
    [user] = by_kind["UserMessageAdded"]
    assert user["content"][0]["type"] == "text"
    assert user["content"][0]["text"].startswith("[REDACTED:user:config1:")
    [call] = by_kind["ToolCallRequested"]
    assert call["input"]["path"].startswith("[REDACTED:")
    # ...what names things is not: node parents, tool call ids and names, block types.
    assert call["name"] == "read" and not call["tool_use_id"].startswith("[REDACTED")
    first = by_kind["ModelResponded"][0]
    assert [b["type"] for b in first["blocks"]] == ["text", "tool_use"]
    assert first["blocks"][1]["id"] == call["tool_use_id"]
    assert first["parent"] == "2" and first["provider"] == "scripted"
    [done] = by_kind["ToolCallCompleted"]
    assert done["output"].startswith("[REDACTED:user:config1:")
    assert cli("context", sid).code == 0
    assert cli("verify", sid).code == 0
    # The recorded requests keep their structure (a manifest names its blobs): a cassette of
    # the session replays identically.
    cassette = tmp_path / "c.cassette.jsonl"
    assert cli("record-cassette", sid, "-o", str(cassette)).code == 0
    replayed = cli("replay", str(cassette))
    assert replayed.code == 0, replayed.out


def test_a_pattern_re2_cannot_compile_is_one_config_error(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _user_config("[redaction]\npatterns = ['(a)\\1', 'ok-[0-9]+']\n")
    r = Cli(repo, capsys)("sessions")
    assert r.code == 2
    lines = [ln for ln in (r.out + r.err).splitlines() if ln.strip()]
    problem = [ln for ln in lines if "redaction.patterns" in ln]
    assert len(problem) == 1 and str(path) in problem[0] and "RE2" in problem[0]
    assert "Traceback" not in r.err
    with pytest.raises(RedactionConfigError, match="RE2 cannot compile it"):
        Redactor.with_settings(environ={"CODER_ES_REDACT_PATTERNS": '["(?=lookahead)"]'})


def test_user_patterns_run_in_linear_time_on_text_and_bytes() -> None:
    redactor = Redactor.with_settings(patterns=["(x+x+)+y", "(a|aa)+$", "tok-[0-9]{4}"], environ={})
    started = time.monotonic()
    assert redactor.redact_bytes(b"x" * 20_000 + b"!") == b"x" * 20_000 + b"!"
    assert redactor.redact_text("a" * 20_000 + "!") == "a" * 20_000 + "!"
    assert time.monotonic() - started < 10
    # A name kept with surrogateescape (bytes that are not UTF-8) is searched, not refused.
    odd = "f\udcff tok-1234 é"
    assert redactor.redact_text(odd).startswith("f\udcff [REDACTED:user:config3]")
