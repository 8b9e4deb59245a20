"""Two applications recording in one process, each sealing with its own key (issue 36, item 2).

The sealing was a class attribute of ``Session`` that the last opened application installed: a
second store opened in the same process sealed the first store's secrets into its own vault
(and under its own key), so the first store could not open them. Each session now records
through the sealing of the application that started or loaded it.
"""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from coder_es.application import CoderApp
from coder_es.sealing import KEY_VAR, SealingKeyError
from coder_es.store.config import StoreConfig

KEYS = [base64.b64encode(bytes([n]) * 32).decode() for n in (7, 9)]
SECRETS = [["AKIAIOSFODNN7EXAMPL" + c for c in "ABC"], ["AKIAJQ4XEXAMPLEKEY2" + c for c in "XYZ"]]


def _said(event: object) -> bool:
    return type(event).__name__ == "UserMessageAdded"


def _store_bytes(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file())


@pytest.mark.parametrize("backend", ["sqlite", "lmdb"])
def test_two_stores_recording_interleaved_each_seal_with_their_own_key(
    tmp_path: Path, backend: str
) -> None:
    configs = [StoreConfig(backend=backend, path=tmp_path / f"store{i}") for i in (0, 1)]
    apps = [CoderApp(c, sealing_environ={KEY_VAR: k}) for c, k in zip(configs, KEYS, strict=True)]
    sids = [app.start_session(workspace=str(tmp_path)).id for app in apps]
    # Interleaved: each store records a message with a secret in turn, the sessions loaded anew
    # every time (from the repository's cache), and a session started in the middle.
    for step in range(3):
        for i, app in enumerate(apps):
            app.update(sids[i], lambda s, i=i, step=step: s.add_user_message(SECRETS[i][step]))
        if step == 1:
            late = apps[0].start_session(workspace=str(tmp_path), title=SECRETS[0][0]).id
    for i, app in enumerate(apps):
        said = [e.content[0]["text"] for e in app.unsealed_events(sids[i]) if _said(e)]
        assert said == SECRETS[i]
        stored = [e.content[0]["text"] for e in app.session_events(sids[i]) if _said(e)]
        assert all(text.startswith("[REDACTED:") for text in stored)
    assert apps[0].unsealed_events(late)[0].title == SECRETS[0][0]
    for app in apps:
        app.close()
    for i, config in enumerate(configs):
        raw = _store_bytes(config.path)
        assert not any(s.encode() in raw for s in SECRETS[0] + SECRETS[1])
        # Readable with its own key only.
        other = CoderApp(config, sealing_environ={KEY_VAR: KEYS[1 - i]})
        try:
            with pytest.raises(SealingKeyError):
                other.unsealed_events(sids[i])
        finally:
            other.close()
        own = CoderApp(config, sealing_environ={KEY_VAR: KEYS[i]})
        try:
            said = [e.content[0]["text"] for e in own.unsealed_events(sids[i]) if _said(e)]
            assert said == SECRETS[i]
        finally:
            own.close()
