"""Redaction never changes an effect; secrets are sealed in the store, never kept in clear.

Every test here is a reproduction from issue 16: the model writes a key, the user types one, a
command prints one; the disk, the command and the next model request carry the real value, while
every byte the store, its exports and its cassettes hold is free of it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agent_helpers import Harness, collect, make_harness, text, tool, turn

from coder_es.application import CoderApp
from coder_es.audit.export import ExportOptions, export_session
from coder_es.audit.verify import verify_store
from coder_es.branching import Branching
from coder_es.providers.anthropic import build_anthropic_body
from coder_es.redaction import Redactor
from coder_es.store.config import StoreConfig
from replay.cassette import dumps
from replay.cassette import export_session as export_cassette

AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
OPENAI_KEY = "sk-proj-" + "Xq7vB2nL9pR4tY6wZ1cD3fG5hJ8kM0sA"
GITHUB_TOKEN = "ghp_" + "R8mN2xQ5vB7cL1kJ4hG6fD9sA3zW0yT5uI8o"


def store_bytes(config: StoreConfig) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(config.path.rglob("*")) if p.is_file())


def requests_sent(h: Harness) -> list[str]:
    """Every request the scripted provider received, as canonical JSON text."""
    return [
        json.dumps(build_anthropic_body(r), sort_keys=True) for p in h.providers for r in p.requests
    ]


def all_clear(h: Harness, secrets: list[str], handle_id: str) -> None:
    """No secret in the store's files, its blobs (stored form), its exports, or a cassette."""
    app = h.app
    raw = store_bytes(app.config)
    sid = app.resolve_session(handle_id)
    exports = [export_session(app, sid, ExportOptions(format=f)) for f in ("jsonl", "md", "html")]
    cassette = dumps(export_cassette(app, sid, redactor=Redactor.from_rules([])))
    stored_blobs = b"".join(app.blobs.stored_form(d) for d in app.blobs.digests())
    for secret in secrets:
        s = secret.encode()
        assert s not in raw, "a secret is in the store's files"
        assert s not in stored_blobs, "a secret is in a blob's stored form"
        for data in exports:
            assert s not in (data if isinstance(data, bytes) else data.encode())
        assert s not in cassette.encode()


@pytest.fixture
def sealed(tmp_path: Path) -> Harness:
    return make_harness(tmp_path, config=StoreConfig(backend="sqlite", path=tmp_path / "store"))


@pytest.mark.parametrize("backend", ["sqlite", "lmdb"])
def test_the_file_the_model_writes_holds_the_key_it_wrote(tmp_path: Path, backend: str) -> None:
    h = make_harness(tmp_path, config=StoreConfig(backend=backend, path=tmp_path / "store"))
    content = f'KEY = "{AWS_KEY}"\n'
    handle = h.start(
        [
            turn(tool("write", path="config.py", content=content)),
            turn(tool("write", path=".env", content=f"OPENAI_API_KEY={OPENAI_KEY}\n")),
            turn(text("done")),
        ]
    )
    collect(handle, "write the config")
    assert (h.root / "config.py").read_text() == content
    assert (h.root / ".env").read_text() == f"OPENAI_API_KEY={OPENAI_KEY}\n"
    (requested,) = [e for e in h.of(handle, "ToolCallRequested") if e.input["path"] == "config.py"]
    assert requested.input["content"].startswith('KEY = "[REDACTED:pattern:aws_access_key:')
    all_clear(h, [AWS_KEY, OPENAI_KEY], handle.loop.session_id)
    h.app.close()


def test_a_command_runs_as_written_and_the_model_sees_its_real_output(sealed: Harness) -> None:
    h = sealed
    command = f"echo {GITHUB_TOKEN} > token.txt && cat token.txt"
    handle = h.start([turn(tool("bash", command=command)), turn(text("ok"))])
    collect(handle, "store the token")
    assert (h.root / "token.txt").read_text() == GITHUB_TOKEN + "\n"
    (result,) = h.of(handle, "ToolCallCompleted")
    assert GITHUB_TOKEN not in result.output and "[REDACTED:pattern:github_token:" in result.output
    # The next request carries the command and its output as they were.
    last = requests_sent(h)[-1]
    assert command.replace('"', '\\"') in last or json.dumps(command)[1:-1] in last
    assert last.count(GITHUB_TOKEN) >= 2
    assert "REDACTED" not in last
    all_clear(h, [GITHUB_TOKEN], handle.loop.session_id)
    h.app.close()


def test_the_users_message_reaches_the_model_as_typed(sealed: Harness) -> None:
    h = sealed
    handle = h.start([turn(text("noted"))])
    message = f"deploy with {OPENAI_KEY} please"
    collect(handle, message)
    (request,) = requests_sent(h)
    assert message in request and "REDACTED" not in request
    (added,) = h.of(handle, "UserMessageAdded")
    assert OPENAI_KEY not in json.dumps(added.content)
    all_clear(h, [OPENAI_KEY], handle.loop.session_id)
    h.app.close()


def test_ordinary_text_that_resembles_a_secret_is_untouched(
    sealed: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POSTGRES_PASSWORD", "postgres")
    h = make_harness(sealed.root.parent / "again")  # a redactor built with that environment
    sealed.app.close()
    files = {
        "requirements.txt": "task-runner-configuration==1.0\n",
        "settings.py": "ENGINE = 'django.db.backends.postgresql'\n",
    }
    handle = h.start(
        [*(turn(tool("write", path=p, content=c)) for p, c in files.items()), turn(text("ok"))]
    )
    collect(handle, "configure")
    for path, content in files.items():
        assert (h.root / path).read_text() == content
    stored = json.dumps([e.input for e in h.of(handle, "ToolCallRequested")])
    assert "REDACTED" not in stored
    h.app.close()


def test_edit_after_reading_a_file_with_a_key(sealed: Harness) -> None:
    h = sealed
    (h.root / "conf.py").write_text(f'KEY = "{AWS_KEY}"\nDEBUG = True\n')
    handle = h.start(
        [
            turn(tool("read", path="conf.py")),
            turn(tool("edit", path="conf.py", old_string=f'KEY = "{AWS_KEY}"\n', new_string="")),
            turn(text("removed")),
        ]
    )
    collect(handle, "drop the key")
    assert (h.root / "conf.py").read_text() == "DEBUG = True\n"
    results = h.of(handle, "ToolCallCompleted")
    assert not any(r.is_error for r in results), [r.output for r in results]
    all_clear(h, [AWS_KEY], handle.loop.session_id)
    h.app.close()


def _run_write_session(tmp_path: Path, redactor: Redactor | None) -> tuple[list[str], str]:
    h = make_harness(tmp_path)
    if redactor is not None:
        h.app.close()
        h = Harness(h.root, CoderApp(h.app.config, redactor=redactor), writable=h.writable)
    turns: list[dict[str, Any]] = [
        turn(tool("write", path="k.py", content=f"K = '{AWS_KEY}'\n")),
        turn(tool("read", path="k.py")),
        turn(text("done")),
    ]
    handle = h.start(turns)
    sid = handle.loop.session_id
    collect(handle, f"use {OPENAI_KEY}")
    # Resume in a new loop: the reopened session's next request must match too.
    again = h.reopen(sid, [turn(text("again"))])
    collect(again, "once more")
    sent = requests_sent(h)
    h.app.close()
    return sent, sid


def test_requests_are_identical_with_and_without_redaction(tmp_path: Path) -> None:
    redacted, sid_a = _run_write_session(tmp_path / "a", None)
    plain, sid_b = _run_write_session(tmp_path / "b", Redactor.from_rules([]))
    assert len(redacted) == len(plain) == 4
    assert any(OPENAI_KEY in r for r in redacted) and any(AWS_KEY in r for r in redacted)
    assert [r.replace(sid_a, "S").replace(str(tmp_path / "a"), "W") for r in redacted] == [
        r.replace(sid_b, "S").replace(str(tmp_path / "b"), "W") for r in plain
    ]


def test_forget_then_verify_passes_and_a_restore_says_what_is_gone(sealed: Harness) -> None:
    h = sealed
    handle = h.start(
        [
            turn(tool("write", path="k.py", content=f"K = '{AWS_KEY}'\n")),
            turn(tool("write", path="k.py", content="K = None\n")),
            turn(text("ok")),
        ]
    )
    collect(handle, "write it")
    sid = h.app.resolve_session(handle.loop.session_id)
    written = str(h.of(handle, "ToolCallCompleted")[0].originator_version)
    branching = Branching(h.app, h.root)
    # Before forgetting, the sealed content restores exactly.
    assert not branching.checkout(sid, written).conflicts
    assert (h.root / "k.py").read_text() == f"K = '{AWS_KEY}'\n"
    branching.checkout(sid, str(h.app.get_session(sid).node_ids()[-1]))
    assert h.app.sealing.vault.forget(sid)
    assert verify_store(h.app).problems == ()
    result = branching.checkout(sid, written)
    assert any("forgotten" in r.detail for r in result.files), [f.to_json() for f in result.files]
    assert (h.root / "k.py").read_text() == "K = None\n"
    h.app.close()
