"""``coder-es enqueue``, ``worker`` and ``project`` as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("procrastinate", reason="the fleet queue needs procrastinate (postgres extra)")

from backends import PG, REPO, requires_postgres
from fleet_helpers import write_script


def _cli(
    root: Path, *args: str, schema: str | None = None, backend: str = "postgres"
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "CODER_ES_BACKEND": backend}
    if schema:
        env.update({**PG, "POSTGRES_SCHEMA": schema})
    return subprocess.run(
        [sys.executable, "-m", "coder_es.cli.main", "--workspace", str(root), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@requires_postgres
def test_enqueue_work_and_project_from_the_command_line(tmp_path: Path, pg_schema: str) -> None:
    script = write_script(tmp_path / "s.json", 1)
    first = _cli(
        tmp_path,
        "enqueue",
        "make a trail",
        "--script",
        str(script),
        "--yes",
        "--json",
        schema=pg_schema,
    )
    assert first.returncode == 0, first.stderr
    made = json.loads(first.stdout)
    assert made["created"] is True
    worked = _cli(tmp_path, "worker", "--until-empty", schema=pg_schema)
    assert worked.returncode == 0, worked.stderr
    assert f"session {made['session_id']}: end_turn" in worked.stderr
    assert (tmp_path / "trail.txt").read_text() == "step-0\n"

    # A follow-up message for the same session, by prefix; the script has no turn left for it.
    again = _cli(
        tmp_path, "enqueue", "--session", made["session_id"][:8], "more", "--yes", schema=pg_schema
    )
    assert again.returncode == 0, again.stderr
    assert f"session {made['session_id']} queued" in again.stdout
    worked = _cli(tmp_path, "worker", "--until-empty", schema=pg_schema)
    assert worked.returncode == 1  # the turn ended on an error: the script is exhausted
    assert "error" in worked.stderr

    projected = _cli(
        tmp_path, "project", "--until-caught-up", "--check", "--json", schema=pg_schema
    )
    assert projected.returncode == 0, projected.stderr
    report = json.loads(projected.stdout)
    assert report["problems"] == [] and report["position"] > 0


def test_fleet_commands_refuse_other_backends(tmp_path: Path) -> None:
    for args in (("worker",), ("enqueue", "hi"), ("project",)):
        done = _cli(tmp_path, *args, backend="sqlite")
        assert done.returncode == 2
        assert "needs the postgres backend" in done.stderr


@requires_postgres
def test_enqueue_rejects_bad_input_and_queues_nothing(tmp_path: Path, pg_schema: str) -> None:
    bad_rule = _cli(
        tmp_path, "enqueue", "hi", "--script", "s.json", "--allow", "teleport:*", schema=pg_schema
    )
    assert bad_rule.returncode == 2 and "unknown tool" in bad_rule.stderr
    missing = _cli(
        tmp_path, "enqueue", "hi", "--script", str(tmp_path / "nope.json"), schema=pg_schema
    )
    assert missing.returncode == 2 and "cannot read the script" in missing.stderr
    nothing = _cli(tmp_path, "enqueue", schema=pg_schema)
    assert nothing.returncode == 2 and "needs a PROMPT" in nothing.stderr
