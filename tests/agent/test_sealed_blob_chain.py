"""The stored (redacted) form of a sealed blob is covered by the chain (issue 29, item 6).

Reproduced: a blob holding a secret is kept as its redacted form (the exact bytes are sealed);
rewriting ``prod-eu-1`` to ``attacker.example.net`` inside that form still verified ``OK``, and
exports and cassettes showed the rewritten text. The event naming the blob now records the sha256
of its stored form (``sealed_forms``, under the chain hash), and ``verify`` compares: no key is
needed, so it holds after ``forget`` too.
"""

from __future__ import annotations

import hashlib
import sqlite3
import zlib
from pathlib import Path

import pytest
from agent_helpers import collect, make_harness, text, tool, turn

from coder_es.cli.main import main
from coder_es.store.config import StoreConfig

AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
CONTENT = f'HOST = "prod-eu-1"\nKEY = "{AWS_KEY}"\n'


def _record(tmp_path: Path) -> tuple[list[str], StoreConfig, str, str]:
    config = StoreConfig(backend="sqlite", path=tmp_path / "store")
    h = make_harness(tmp_path, config=config)
    handle = h.start([turn(tool("write", path="deploy.py", content=CONTENT)), turn(text("done"))])
    collect(handle, "write the deploy settings")
    sid = str(handle.loop.session_id)
    digest = hashlib.sha256(CONTENT.encode()).hexdigest()
    assert h.app.blobs.is_sealed(digest)
    h.app.close()
    args = ["--store", str(config.path), "--backend", "sqlite", "--workspace", str(h.root)]
    return args, config, sid, digest


def _rewrite(config: StoreConfig, digest: str, old: bytes, new: bytes) -> None:
    with sqlite3.connect(config.sqlite_file) as conn:
        (record,) = conn.execute(
            "SELECT record FROM coder_es_blobs WHERE digest = ?", (digest,)
        ).fetchone()
        form = zlib.decompress(record[17:])
        assert old in form and AWS_KEY.encode() not in form
        changed = record[:17] + zlib.compress(form.replace(old, new))
        conn.execute("UPDATE coder_es_blobs SET record = ? WHERE digest = ?", (changed, digest))


@pytest.mark.parametrize("forgotten", [False, True])
def test_a_rewritten_stored_form_fails_verify_and_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], forgotten: bool
) -> None:
    args, config, sid, digest = _record(tmp_path)
    assert main([*args, "verify", "--all"]) == 0
    if forgotten:  # no key can open the blob any more: the chain still vouches for its form
        assert main([*args, "forget", sid]) == 0
    _rewrite(config, digest, b"prod-eu-1", b"attacker.example.net")
    capsys.readouterr()
    for target in (["--all"], [sid]):
        assert main([*args, "verify", *target]) == 1
        out = capsys.readouterr()
        shown = out.out + out.err
        assert digest in shown and "deploy.py" in shown, shown
        assert "stored (redacted) form" in shown and "Traceback" not in shown


def test_a_marker_swapped_for_another_is_found_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args, config, _sid, digest = _record(tmp_path)
    _rewrite(config, digest, b"[REDACTED:pattern:aws_access_key:", b"[REDACTED:pattern:jwt:")
    assert main([*args, "verify", "--all"]) == 1
    assert digest in capsys.readouterr().out
