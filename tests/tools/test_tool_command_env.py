"""coder-es's own secrets never reach what the agent runs (issue 29, item 4): every
``CODER_ES_*`` variable, and any variable holding the value of a coder-es key (the sealing key,
the serve token), is removed from the environment of bash commands (in the sandbox, the
fallback and an editor's terminal); the sealing key's value is an exact-match redaction rule."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest
from test_tool_shell_search import Make, run

from coder_es.redaction import Redactor
from coder_es.secret_env import command_environ

SEALING_KEY = base64.b64encode(bytes(range(7, 39))).decode()
SERVE_TOKEN = "serve-token-" + "Zk3" * 8


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODER_ES_SEALING_KEY", SEALING_KEY)
    monkeypatch.setenv("CODER_ES_SERVE_TOKEN", SERVE_TOKEN)
    monkeypatch.setenv("CODER_ES_REDACT_ENV", "MY_*")
    monkeypatch.setenv("COPIED_KEY", SEALING_KEY)  # the same value under another name
    monkeypatch.setenv("AUTH_HEADER", f"Bearer {SERVE_TOKEN}")
    monkeypatch.setenv("KEEP_ME", "kept")


def test_bash_does_not_inherit_coder_es_variables_or_key_values(keys: None, make_ctx: Make) -> None:
    res = run("bash", {"command": "env; echo key=$CODER_ES_SEALING_KEY."}, make_ctx())
    assert SEALING_KEY not in res.output and SERVE_TOKEN not in res.output
    assert "CODER_ES_" not in res.output
    assert "COPIED_KEY" not in res.output and "AUTH_HEADER" not in res.output
    assert "key=." in res.output and "KEEP_ME=kept" in res.output


def test_the_scrubbed_environment_is_an_allow_list_of_what_is_not_ours(keys: None) -> None:
    env = command_environ()
    assert not [name for name in env if name.startswith("CODER_ES_")]
    assert SEALING_KEY not in "".join(env.values())
    assert env["KEEP_ME"] == "kept" and env["PATH"] == os.environ["PATH"]


def test_the_sealing_key_is_redacted_wherever_it_appears(keys: None) -> None:
    text = f"the key is {SEALING_KEY}, the token {SERVE_TOKEN}."
    redacted = Redactor.from_environ().redact_text(text)
    assert SEALING_KEY not in redacted and SERVE_TOKEN not in redacted
    assert "[REDACTED:env:CODER_ES_SEALING_KEY]" in redacted


def test_a_low_entropy_sealing_key_is_still_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The key is an exact-match rule, whatever it looks like (a test key of repeated bytes)."""
    weak = base64.b64encode(b"\0" * 32).decode()
    monkeypatch.setenv("CODER_ES_SEALING_KEY", weak)
    assert weak not in Redactor.from_environ().redact_text(f"echo {weak}")


def test_an_editors_terminal_runs_without_them(keys: None, repo: Path, tmp_path: Path) -> None:
    """The terminal's environment is the client's: the wrapper removes ours there."""
    import subprocess

    from coder_es.tools.bash import scrub_argv

    argv = scrub_argv(["sh", "-c", "env"])
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    assert "CODER_ES_" not in done.stdout and SEALING_KEY not in done.stdout
    assert "KEEP_ME=kept" in done.stdout
