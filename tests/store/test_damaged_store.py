"""A damaged store file gives a clear message naming it, never a signal or a traceback (18.5)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from backends import REPO

from coder_es.application import CoderApp
from coder_es.cli.main import main
from coder_es.store.config import StoreConfig

COMMANDS = [["sessions"], ["verify", "--all"], ["doctor"]]


def _store(backend: str, tmp_path: Path) -> StoreConfig:
    config = StoreConfig(backend=backend, path=tmp_path / "store")
    app = CoderApp(config)
    try:
        for i in range(12):
            s = app.start_session(workspace=str(tmp_path), title=f"session {i}")
            s.add_user_message("some words " * 150)
            app.save(s)
    finally:
        app.close()
    return config


def _truncate(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def _garbage(path: Path) -> None:
    path.write_bytes(b"this is not a database file at all\n" * 300)


def _directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


def _short(path: Path) -> None:
    os.truncate(path, 100)


DAMAGE: dict[str, Callable[[Path], None]] = {
    "truncated": _truncate,
    "not a database": _garbage,
    "a directory": _directory,
    "a few bytes": _short,
}


def _data_file(config: StoreConfig) -> Path:
    if config.backend == "lmdb":
        return config.lmdb_dir / "data.mdb"
    for extra in config.path.glob("events.sqlite-*"):  # the WAL would repair what we damage
        extra.unlink()
    return config.sqlite_file


@pytest.mark.parametrize("backend", ["lmdb", "sqlite"])
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_every_command_names_the_damaged_file(
    backend: str, damage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if backend == "lmdb":
        pytest.importorskip("lmdb")
    config = _store(backend, tmp_path)
    data = _data_file(config)
    DAMAGE[damage](data)
    for command in COMMANDS:
        args = ["--workspace", str(tmp_path), "--backend", backend, "--store", str(config.path)]
        code = main([*args, *command])
        out, err = capsys.readouterr()
        assert code == 1, (command, out, err)
        said = err + out  # doctor reports on stdout
        assert str(data) in said, (command, said)
        assert "backup" in said, said
        assert "Traceback" not in said


def test_a_truncated_lmdb_file_no_longer_kills_the_process_with_sigbus(tmp_path: Path) -> None:
    pytest.importorskip("lmdb")
    config = _store("lmdb", tmp_path)
    _truncate(_data_file(config))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = ["--workspace", str(tmp_path), "--backend", "lmdb", "--store", str(config.path)]
    done = subprocess.run(
        [sys.executable, "-m", "coder_es.cli.main", *args, "sessions"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 1, (done.returncode, done.stderr)  # was -7 (SIGBUS), exit 135
    assert "is truncated" in done.stderr and "data.mdb" in done.stderr
