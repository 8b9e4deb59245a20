"""An exported JSONL file verifies on its own; every kind of damage to it is detected."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from backends import cli_store_args, cli_store_env

from coder_es.application import CoderApp
from coder_es.audit.errors import UnreadableExportError
from coder_es.audit.export import ExportOptions, export_session
from coder_es.audit.filters import ExportFilter
from coder_es.audit.verify import verify_export
from coder_es.cli.main import main
from coder_es.store.config import StoreConfig
from tests.audit.conftest import Recorded


@pytest.fixture
def small_export(tmp_path: Path) -> bytes:
    app = CoderApp(StoreConfig(backend="popo", path=tmp_path))
    try:
        s = app.start_session(workspace="/w", title="t")
        app.update(s.id, lambda s: s.add_user_message("héllo \u001b[1m"))
        app.update(s.id, lambda s: s.label("2", "first"))
        app.update(s.id, lambda s: s.record_error(kind="timeout", message="slow", attempt=1))
        return export_session(app, s.id, ExportOptions(format="jsonl"))
    finally:
        app.close()


def _check(tmp_path: Path, data: bytes) -> bool:
    """Whether verify finds a problem in ``data`` (or refuses it as unreadable)."""
    path = tmp_path / "x.jsonl"
    path.write_bytes(data)
    try:
        return not verify_export(path).ok
    except UnreadableExportError:
        return True


def test_intact_export_verifies(tmp_path: Path, small_export: bytes) -> None:
    path = tmp_path / "ok.jsonl"
    path.write_bytes(small_export)
    report = verify_export(path)
    assert report.ok and report.events == 4
    lines = small_export.decode().splitlines()
    header, trailer = json.loads(lines[0]), json.loads(lines[-1])
    assert header["format"] == "coder-es-audit-jsonl" and header["complete"] is True
    assert set(header["tools"]) == {"coder-es", "eventsourcing", "python"}
    assert trailer["head_hash"] == json.loads(lines[-2])["hash"] == header["session_head"]["hash"]


def test_every_single_bit_flip_is_detected(tmp_path: Path, small_export: bytes) -> None:
    missed = []
    for i in range(len(small_export)):
        for bit in (0x01, 0x20):  # a low bit and the ASCII case bit
            damaged = bytearray(small_export)
            damaged[i] ^= bit
            if not _check(tmp_path, bytes(damaged)):
                missed.append((i, bit))
    assert not missed


def test_line_deletion_swap_insertion_and_truncation_are_detected(
    tmp_path: Path, small_export: bytes
) -> None:
    lines = small_export.splitlines(keepends=True)
    variants: dict[str, bytes] = {}
    for i in range(len(lines)):
        variants[f"delete line {i + 1}"] = b"".join(lines[:i] + lines[i + 1 :])
        variants[f"duplicate line {i + 1}"] = b"".join(lines[: i + 1] + lines[i:])
        if i + 1 < len(lines):
            swapped = list(lines)
            swapped[i], swapped[i + 1] = swapped[i + 1], swapped[i]
            variants[f"swap lines {i + 1},{i + 2}"] = b"".join(swapped)
    for cut in range(1, len(small_export) - 1, 7):
        variants[f"truncate at byte {cut}"] = small_export[:cut]
    variants["truncate the last line"] = b"".join(lines[:-1])
    missed = [name for name, data in variants.items() if not _check(tmp_path, data)]
    assert not missed


def test_problems_are_named(tmp_path: Path, small_export: bytes) -> None:
    lines = small_export.splitlines(keepends=True)
    path = tmp_path / "x.jsonl"

    def kinds(data: bytes) -> set[tuple[int | None, str]]:
        path.write_bytes(data)
        return {(p.version, p.kind) for p in verify_export(path).problems}

    edited = small_export.replace(b"h\xc3\xa9llo", b"hallo")
    assert (2, "modified") in kinds(edited)
    assert (3, "deleted") in kinds(b"".join(lines[:3] + lines[4:]))
    swapped = kinds(b"".join([lines[0], lines[2], lines[1], *lines[3:]]))
    assert "reordered" in {k for _, k in swapped}
    assert (2, "inserted") in kinds(b"".join(lines[:3] + lines[2:]))
    assert (5, "truncated") in kinds(b"".join(lines[:-1]))


def test_filtered_export_verifies_and_says_it_is_partial(
    recorded_on_each_backend: Recorded, tmp_path: Path
) -> None:
    recorded = recorded_on_each_backend
    data = export_session(
        recorded.app,
        recorded.session,
        ExportOptions(format="jsonl", filter=ExportFilter(kinds=frozenset({"PermissionDecided"}))),
    )
    path = tmp_path / "perm.jsonl"
    path.write_bytes(data)
    report = verify_export(path)
    assert report.ok and report.events == 3
    assert json.loads(data.splitlines()[0])["complete"] is False
    lines = data.splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:2] + lines[3:]))  # drop one decision
    assert not verify_export(path).ok


def test_cli_export_and_verify_exit_codes(
    recorded_persistent: Recorded,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recorded = recorded_persistent
    recorded.app.close()
    config = recorded.app.config
    for key, value in cli_store_env(config).items():
        monkeypatch.setenv(key, value)
    store = cli_store_args(config)
    out = tmp_path / "s.jsonl"
    sid = str(recorded.session)
    assert main([*store, "export", sid[:8], "--format", "jsonl", "-o", str(out)]) == 0
    assert main([*store, "verify", sid[:8]]) == 0
    assert main([*store, "verify", "--all", "--json"]) == 0
    assert main([*store, "verify", str(out)]) == 0
    capsys.readouterr()
    out.write_bytes(out.read_bytes().replace(b"fix the add", b"fix the sub"))
    assert main([*store, "verify", str(out), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and {p["kind"] for p in report["problems"]} >= {"modified"}
    assert main([*store, "verify", str(tmp_path / "nope.jsonl")]) == 2
    (tmp_path / "junk.txt").write_text("hello\n")
    assert main([*store, "verify", str(tmp_path / "junk.txt")]) == 2
    assert main([*store, "verify", "ffffffff"]) == 2
    assert main([*store, "export", sid, "--format", "md", "--kinds", "Nope"]) == 2
    assert main([*store, "export", sid, "--format", "md", "--since", "yesterday"]) == 2
    assert main([*store, "export", sid, "--format", "md", "--branch", "999"]) == 2
