"""``forget`` cannot be undone from the store's bytes (issue 29, item 5).

Reproduced: after ``coder-es forget S`` the wrapped data key was still in LMDB's ``data.mdb`` (a
free page, not cleared) and the user key, which forget did not rotate, opened it again. Now forget
deletes the session's sealed records, rotates the store's wrapping key (every other session's key
re-wrapped, the old wrapping key destroyed) and scrubs the files: no byte of any of them remains,
and the other sessions keep every sealed value.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from uuid import UUID

import pytest

from coder_es.cli.main import main
from coder_es.sealing import SecretVault
from coder_es.store.config import StoreConfig

KEY_A = "sk-proj-" + "Xq7vB2nL9pR4tY6wZ1cD3fG5hJ8kM0sA"
KEY_B = "ghp_" + "R8mN2xQ5vB7cL1kJ4hG6fD9sA3zW0yT5uI8o"
ROOT = Path(__file__).resolve().parents[2]


def _script(tmp_path: Path) -> str:
    turns = [{"blocks": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn"}] * 2
    path = tmp_path / "turns.json"
    path.write_text(json.dumps({"turns": turns}))
    return str(path)


def _run(args: list[str], prompt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    run = [*args, "run", prompt, "--provider", "scripted", "--script", _script(tmp_path), "--json"]
    assert main(run) == 0
    return str(json.loads(capsys.readouterr().out.splitlines()[0])["session_id"])


def _records(config: StoreConfig, sid: str) -> list[bytes]:
    """The stored bytes of session ``sid``'s sealed records (its wrapped key, its values)."""
    views = config.open_view_store()
    try:
        return [r.data for k in views.keys(f"sealed/{sid}/") if (r := views.get(k)) is not None]
    finally:
        views.close()


def _every_byte(config: StoreConfig) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(config.path.rglob("*")) if p.is_file())


def _open(config: StoreConfig, sid: str) -> str:
    """Session ``sid``'s sealed values, opened (what resuming it needs)."""
    views = config.open_view_store()
    try:
        vault = SecretVault(views)
        ids = [k.rsplit("/", 1)[1] for k in views.keys(f"sealed/{sid}/v/")]
        return " ".join(str(vault.open_value(UUID(sid), i)) for i in ids)
    finally:
        views.close()


@pytest.fixture(params=["lmdb", "sqlite"])
def store(
    request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[list[str], StoreConfig, str, str]:
    ws = tmp_path / "ws"
    ws.mkdir()
    args = ["--workspace", str(ws), "--backend", request.param]
    gone = _run(args, f"deploy with {KEY_A}", tmp_path, capsys)
    kept = _run(args, f"push with {KEY_B}", tmp_path, capsys)
    return args, StoreConfig(request.param, ws / ".coder-es"), gone, kept


def test_forget_leaves_no_byte_of_the_wrapped_key_or_the_sealed_values(
    store: tuple[list[str], StoreConfig, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    args, config, gone, kept = store
    forgotten = _records(config, gone)
    assert len(forgotten) >= 2  # the wrapped data key and the sealed value
    assert all(r in _every_byte(config) for r in forgotten)
    old_kept = _records(config, kept)
    assert main([*args, "forget", gone]) == 0
    out = capsys.readouterr().out
    assert "scrubbed" in out, out
    raw = _every_byte(config)
    for record in forgotten:
        assert record not in raw, "a byte string of a forgotten record is still in the store"
    # The wrapping key was rotated: the kept session's key record was re-wrapped, and its old
    # form is gone too; its sealed values still open.
    assert _records(config, kept) != old_kept
    assert _open(config, kept) == KEY_B
    assert _open(config, gone) == ""
    assert main([*args, "verify", "--all"]) == 0


def test_a_second_forget_rotates_again_and_nothing_is_lost(
    store: tuple[list[str], StoreConfig, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    args, config, gone, kept = store
    assert main([*args, "forget", gone]) == 0
    wrap_1 = _records(config, "wrap")
    assert main([*args, "forget", gone, "--json"]) == 0
    report = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert report["shredded"] == [] and report["scrubbed"] is True
    assert wrap_1 and wrap_1[0] not in _every_byte(config)
    assert _open(config, kept) == KEY_B


def test_a_store_open_in_another_process_is_not_swapped_and_the_next_forget_scrubs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    args = ["--workspace", str(ws), "--backend", "lmdb"]
    gone = _run(args, f"deploy with {KEY_A}", tmp_path, capsys)
    config = StoreConfig("lmdb", ws / ".coder-es")
    forgotten = _records(config, gone)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
                import sys
                from coder_es.store.lmdb_env import LMDBSettings, acquire_store
                acquire_store(LMDBSettings({str(config.lmdb_dir)!r}))
                print("open", flush=True)
                sys.stdin.read()
            """),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "open\n"
        assert main([*args, "forget", gone]) == 1
        err = capsys.readouterr().err
        assert "another process has the store" in err and "Traceback" not in err
        assert _open(config, gone) == ""  # the key is gone already
    finally:
        holder.communicate("")
    assert main([*args, "forget", gone]) == 0
    raw = _every_byte(config)
    assert not any(r in raw for r in forgotten)


def test_a_scrub_killed_before_its_swap_loses_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    args = ["--workspace", str(ws), "--backend", "lmdb"]
    gone = _run(args, f"deploy with {KEY_A}", tmp_path, capsys)
    kept = _run(args, f"push with {KEY_B}", tmp_path, capsys)
    config = StoreConfig("lmdb", ws / ".coder-es")
    # The scrub is killed at the moment it would rename its copy over the store.
    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
                import os
                from coder_es.store import scrub
                os.replace = lambda *a: os._exit(9)
                scrub.scrub_lmdb({str(config.lmdb_dir)!r})
            """),
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert killed.returncode == 9
    assert list(config.lmdb_dir.glob(".scrub-*"))  # the copy it left
    assert _open(config, kept) == KEY_B and _open(config, gone) == KEY_A
    assert main([*args, "verify", "--all"]) == 0
    assert main([*args, "forget", gone]) == 0
    assert not list(config.lmdb_dir.glob(".scrub-*"))
    assert _open(config, kept) == KEY_B
    assert main([*args, "tree", kept]) == 0


def test_rotation_and_scrub_on_every_backend(store_config: StoreConfig) -> None:
    """The vault's side on each backend (PostgreSQL included): forgetting one session re-wraps
    the others under a new wrapping key, and the scrub runs (VACUUM FULL on PostgreSQL)."""
    from coder_es.store.scrub import scrub_store
    from coder_es.store.views import Guard, ViewRecord

    store_config.prepare()
    a, b = UUID(int=1), UUID(int=2)
    views = store_config.open_view_store()
    try:
        vault = SecretVault(views)
        ids = {s: vault.sealer(s)("pattern", "x", f"value-of-{s}") for s in (a, b)}
        wrap = views.get("sealed/wrap/key")
        assert wrap is not None and wrap.position == 1
        assert vault.forget_sessions([a]) == [a]
        assert views.keys(f"sealed/{a}/") == [f"sealed/{a}/forgotten"]
        rotated = views.get("sealed/wrap/key")
        assert rotated is not None and rotated.position == 2 and rotated.data != wrap.data
        assert SecretVault(views).open_value(b, ids[b]) == f"value-of-{b}"
        # A guard that no longer holds writes nothing.
        assert not views.batch({"x": ViewRecord(0, b"x")}, guards=[Guard("sealed/wrap/key", 1)])
        assert views.get("x") is None
    finally:
        views.close()
    scrub_store(store_config)
    if store_config.backend == "popo":
        return  # memory: nothing to reopen
    views = store_config.open_view_store()
    try:
        assert SecretVault(views).open_value(b, ids[b]) == f"value-of-{b}"
    finally:
        views.close()


def test_the_forget_bench_runs_and_reports_its_figures() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "forget.py"), "--sessions", "12", "--runs", "1"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for backend in ("lmdb", "sqlite"):
        assert f"{backend}: 12 sessions" in done.stdout
    assert (
        done.stdout.count("given back per forget") == 2
        and "x copying the store's files" in done.stdout
    )


def test_a_store_whose_keys_the_user_key_wraps_directly_is_read_and_rotated(
    tmp_path: Path,
) -> None:
    """Stores written before wrapping keys hold data keys wrapped by the user key itself
    (generation 0): they still open, and the first forget moves them under a wrapping key."""
    from coder_es.sealing import _data_key_aad, _encrypt
    from coder_es.store.views import MemoryViewStore, ViewRecord

    views = MemoryViewStore()
    vault = SecretVault(views)
    old, other = UUID(int=7), UUID(int=8)
    user = vault._user_key(create=True).material
    data_key = os.urandom(32)
    views.put(f"sealed/{old}/key", ViewRecord(0, _encrypt(user, data_key, _data_key_aad(old))))
    value_id = vault.sealer(old)("pattern", "x", "legacy-value")
    assert SecretVault(views).open_value(old, value_id) == "legacy-value"
    vault.sealer(other)("pattern", "x", "other-value")
    assert vault.forget_sessions([other]) == [other]
    record = views.get(f"sealed/{old}/key")
    assert record is not None and record.position == 2  # the wrapping key's generation
    assert SecretVault(views).open_value(old, value_id) == "legacy-value"


@pytest.mark.slow
def test_forget_on_a_10k_session_store_takes_seconds(tmp_path: Path) -> None:
    """The issue's measure (bench/forget.py): ~6 minutes to build the store, so slow."""
    from bench_loader import load_bench

    figures = load_bench("forget").run("lmdb", 10_000, 1)
    assert figures["forget_s"] < 30 and figures["given_back"] > 0
