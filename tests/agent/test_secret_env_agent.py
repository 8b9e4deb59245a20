"""The reproduction of issue 29, item 4 through a whole session: ``echo $CODER_ES_SEALING_KEY``
printed the key, and the store and its exports kept it in clear (store + export then open every
sealed value). Now the command sees no such variable, and the key's value, should it reach the
log any other way (the model writes it out), is stored and exported redacted."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from agent_helpers import collect, make_harness, text, tool, turn
from test_secrets_sealed import all_clear

from coder_es.store.config import StoreConfig

SEALING_KEY = base64.b64encode(bytes(range(100, 132))).decode()
SERVE_TOKEN = "tok-" + "Qw9xZ2" * 6


@pytest.fixture(autouse=True)
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODER_ES_SEALING_KEY", SEALING_KEY)
    monkeypatch.setenv("CODER_ES_SERVE_TOKEN", SERVE_TOKEN)


def test_echo_of_the_sealing_key_prints_nothing_and_nothing_is_kept(tmp_path: Path) -> None:
    h = make_harness(tmp_path, config=StoreConfig(backend="sqlite", path=tmp_path / "store"))
    handle = h.start(
        [
            turn(tool("bash", command="echo k=$CODER_ES_SEALING_KEY t=$CODER_ES_SERVE_TOKEN")),
            turn(tool("bash", command=f"echo {SEALING_KEY} > pasted.txt; cat pasted.txt")),
            turn(text("done")),
        ]
    )
    collect(handle, "print the key")
    first, second = h.of(handle, "ToolCallCompleted")
    assert "k= t=" in first.output
    # What the model wrote out is run as written (the effect), stored redacted.
    assert (h.root / "pasted.txt").read_text() == SEALING_KEY + "\n"
    assert "[REDACTED:env:CODER_ES_SEALING_KEY:" in second.output
    all_clear(h, [SEALING_KEY, SERVE_TOKEN], handle.loop.session_id)
    h.app.close()
