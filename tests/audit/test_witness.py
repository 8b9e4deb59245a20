"""The witness outside the store (issue 18.4): what deleting inside the store cannot hide."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from uuid import UUID

import pytest
from backends import make_config

from coder_es.application import CoderApp
from coder_es.audit.problems import VerifyReport
from coder_es.audit.verify import verify_store
from coder_es.store.config import StoreConfig
from coder_es.store.witness import read_witness
from coder_es.userdirs import user_data_dir
from tests.audit.conftest import sqlite_tampering


def _sessions(config: StoreConfig, n: int = 3) -> list[UUID]:
    app = CoderApp(config)
    try:
        ids = []
        for i in range(n):
            s = app.start_session(workspace="/w", title=f"s{i}")
            for j in range(4):
                s.add_user_message(f"message {j}")
            app.save(s)
            ids.append(s.id)
        return ids
    finally:
        app.close()


def _sql(config: StoreConfig, *statements: str, params: tuple[object, ...] = ()) -> None:
    """Run statements on a PostgreSQL store (the first one with ``params``)."""
    import psycopg

    info = config.postgres_conninfo()
    with psycopg.connect(**{k: v for k, v in info.items() if v}, autocommit=True) as conn:
        for i, statement in enumerate(statements):
            conn.execute(statement, params if i == 0 else ())


def _verify(config: StoreConfig) -> VerifyReport:
    app = CoderApp(config)
    try:
        return verify_store(app)
    finally:
        app.close()


def test_every_save_is_witnessed_outside_the_store(persistent_store_config: StoreConfig) -> None:
    ids = _sessions(persistent_store_config, 2)
    [path] = (user_data_dir() / "witness").iterdir()
    seen = read_witness(path)
    assert set(seen) == {str(i) for i in ids}
    assert {w.version for w in seen.values()} == {5}
    assert _verify(persistent_store_config).ok


def test_deleting_the_last_events_and_the_anchor_is_caught(sqlite_config: StoreConfig) -> None:
    ids = _sessions(sqlite_config)
    victim = ids[1]
    with sqlite3.connect(sqlite_config.sqlite_file) as conn:
        conn.execute(
            "DELETE FROM stored_events WHERE originator_id = ? AND originator_version > 3",
            (victim.hex,),
        )
        conn.execute("DELETE FROM coder_es_views WHERE key LIKE 'audit-anchor%'")
    report = _verify(sqlite_config)
    found = {(p.session, p.version, p.kind) for p in report.problems}
    assert found == {(str(victim), 4, "truncated")}
    assert "witness" in report.problems[0].detail


def test_a_rewritten_last_event_with_its_anchor_is_caught(sqlite_config: StoreConfig) -> None:
    ids = _sessions(sqlite_config, 1)
    with sqlite_tampering(sqlite_config.sqlite_file) as conn:
        conn.execute(
            "UPDATE stored_events SET state = CAST(REPLACE(CAST(state AS TEXT), 'message 3', "
            "'message X') AS BLOB) WHERE originator_id = ? AND originator_version = 5",
            (ids[0].hex,),
        )
        conn.execute("DELETE FROM coder_es_views WHERE key LIKE 'audit-anchor%'")
    report = _verify(sqlite_config)
    assert [(p.version, p.kind) for p in report.problems] == [(5, "modified")]


@pytest.mark.parametrize("how", ["empty data.mdb", "store deleted"])
def test_an_emptied_or_deleted_lmdb_store_reports_the_sessions_it_lost(
    tmp_path: Path, how: str
) -> None:
    pytest.importorskip("lmdb")
    config = StoreConfig(backend="lmdb", path=tmp_path / "store")
    ids = _sessions(config)
    if how == "empty data.mdb":
        (config.lmdb_dir / "data.mdb").write_bytes(b"")
    else:
        shutil.rmtree(config.path)
    report = _verify(config)
    assert not report.ok
    assert "the store lost 3 session(s)" in report.problems[0].detail
    assert {p.session for p in report.problems if p.kind == "deleted"} == {str(i) for i in ids}


def test_postgres_rows_deleted_with_their_anchors_are_caught(
    tmp_path: Path, pg_schema: str
) -> None:
    import psycopg

    config = make_config("postgres", tmp_path, pg_schema)
    ids = _sessions(config, 2)
    info = config.postgres_conninfo()
    with psycopg.connect(**{k: v for k, v in info.items() if v}, autocommit=True) as conn:
        conn.execute(f"DELETE FROM {pg_schema}.coder_es_events WHERE originator_id = %s", (ids[0],))
        conn.execute(f"DELETE FROM {pg_schema}.coder_es_views")
    report = _verify(config)
    assert {(p.session, p.kind) for p in report.problems} == {
        ("", "lost"),
        (str(ids[0]), "deleted"),
    }


def test_a_dropped_postgres_events_table_is_recreated_and_the_loss_reported(
    tmp_path: Path, pg_schema: str
) -> None:
    import psycopg

    config = make_config("postgres", tmp_path, pg_schema)
    ids = _sessions(config, 2)
    info = config.postgres_conninfo()
    with psycopg.connect(**{k: v for k, v in info.items() if v}, autocommit=True) as conn:
        conn.execute(f"DROP TABLE {pg_schema}.coder_es_events CASCADE")
    report = _verify(config)  # opening the store creates the table again, empty
    assert "the store lost 2 session(s)" in report.problems[0].detail
    assert {p.session for p in report.problems if p.kind == "deleted"} == {str(i) for i in ids}


@pytest.mark.parametrize("backend", ["lmdb", "sqlite"])
def test_verify_on_a_deleted_store_directory_says_what_it_lost(
    tmp_path: Path, backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from coder_es.cli.main import main

    config = StoreConfig(backend=backend, path=tmp_path / "store")
    _sessions(config, 2)
    shutil.rmtree(config.path)
    args = ["--workspace", str(tmp_path), "--backend", backend, "--store", str(config.path)]
    assert main([*args, "verify", "--all"]) == 1
    out = capsys.readouterr().out
    assert "the store lost 2 session(s)" in out
    assert not config.path.exists()  # verifying created nothing
