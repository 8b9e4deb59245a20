"""verify on stored events it cannot decode (issue 18.3): each is a finding, the rest is checked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from uuid import UUID

import pytest
from backends import REPO

from coder_es.application import CoderApp
from coder_es.audit.verify import verify_session, verify_store
from coder_es.errors import StoreError
from coder_es.store.config import StoreConfig
from tests.audit.conftest import damage_lmdb_values, record_demo, sqlite_tampering


def _two_sessions(config: StoreConfig) -> tuple[UUID, UUID]:
    app = CoderApp(config)
    try:
        damaged = record_demo(app)
        intact = app.start_session(workspace="/w", title="intact")
        intact.add_user_message("still fine")
        app.save(intact)
        return damaged, intact.id
    finally:
        app.close()


def _verify_cli(config: StoreConfig) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = ["--backend", config.backend, "--store", str(config.path)]
    return subprocess.run(
        [sys.executable, "-m", "coder_es.cli.main", *args, "verify", "--all", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def _sql(config: StoreConfig, statement: str, params: tuple[object, ...]) -> None:
    with sqlite_tampering(config.sqlite_file) as conn:
        conn.execute(statement, params)


ROW = "WHERE originator_id = ? AND originator_version = ?"


@pytest.mark.parametrize(
    ("damage", "version", "expected"),
    [
        ("UPDATE stored_events SET state = CAST('{\"timestamp\": {' AS BLOB) " + ROW, 4, "JSON"),
        ("UPDATE stored_events SET state = 42 " + ROW, 6, "holds int, not bytes"),
        ("UPDATE stored_events SET state = CAST(X'FF00' AS BLOB) " + ROW, 8, "UTF-8"),
    ],
)
def test_sqlite_events_that_cannot_be_decoded_are_findings(
    sqlite_config: StoreConfig, damage: str, version: int, expected: str
) -> None:
    damaged, intact = _two_sessions(sqlite_config)
    _sql(sqlite_config, damage, (damaged.hex, version))
    result = _verify_cli(sqlite_config)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    report = json.loads(result.stdout)
    found = [p for p in report["problems"] if p["kind"] == "undecodable"]
    assert [(p["session"], p["version"]) for p in found] == [(str(damaged), version)]
    assert expected in found[0]["detail"]
    # Nothing else is reported: the damaged event's neighbours and the other session are fine.
    assert len(report["problems"]) == 1
    assert str(intact) in {h["session"] for h in report["heads"]}
    # The per-session form reports it too, and the sessions list still names what is damaged.
    app = CoderApp(sqlite_config)
    try:
        assert [(p.version, p.kind) for p in verify_session(app, damaged).problems] == [
            (version, "undecodable")
        ]
        with pytest.raises(StoreError, match=f"session {damaged}"):
            app.get_session(damaged)
    finally:
        app.close()


def test_sqlite_renamed_field_and_unreadable_columns(sqlite_config: StoreConfig) -> None:
    damaged, intact = _two_sessions(sqlite_config)
    _sql(
        sqlite_config,
        "UPDATE stored_events SET state = CAST(REPLACE(CAST(state AS TEXT), "
        "'\"content\"', '\"kontent\"') AS BLOB) " + ROW,
        (damaged.hex, 2),
    )
    _sql(sqlite_config, "UPDATE stored_events SET originator_version = 'x' " + ROW, (intact.hex, 2))
    app = CoderApp(sqlite_config)
    try:
        report = verify_store(app)
    finally:
        app.close()
    kinds = {(p.session, p.version, p.kind) for p in report.problems}
    # A renamed field no longer hashes as recorded; a version that is not a number is named.
    assert (str(damaged), 2, "modified") in kinds
    assert (str(intact), None, "undecodable") in kinds
    assert not report.ok


def test_lmdb_events_that_cannot_be_decoded_are_findings(tmp_path: Path) -> None:
    pytest.importorskip("lmdb")
    config = StoreConfig(backend="lmdb", path=tmp_path / "store")
    damaged, intact = _two_sessions(config)
    # The user message of the demo session: its JSON is cut open.
    assert damage_lmdb_values(config.lmdb_dir, b'"fix the add function"', b'"fix the') == 1
    result = _verify_cli(config)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    report = json.loads(result.stdout)
    found = [p for p in report["problems"] if p["kind"] == "undecodable"]
    assert [(p["session"], p["version"]) for p in found] == [(str(damaged), 2)]
    assert "JSON" in found[0]["detail"]
    assert str(intact) in {h["session"] for h in report["heads"]}
