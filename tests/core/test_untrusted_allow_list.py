"""Issue 28, point 3: an untrusted project config is an ALLOW-LIST. Before ``coder-es trust`` it
may only tighten (deny and ask rules, a stricter default, a stricter preset, a stricter
sandbox); every other key (the agent when it loosens, the store, providers, anything added
later) is held back and named by ``run`` and ``doctor``."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coder_es.cli.main import main
from coder_es.config import load_config
from coder_es.config.schema import SCHEMA, Entries, Table, leaf_paths, node_at
from coder_es.config.untrusted import HELD_BACK, TIGHTENING, classify
from coder_es.userdirs import user_config_dir


def _user_config(text: str) -> None:
    path = user_config_dir() / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _project(ws: Path, text: str) -> Path:
    (ws / ".coder-es").mkdir(parents=True, exist_ok=True)
    path = ws / ".coder-es" / "config.toml"
    path.write_text(text)
    return path


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for var in ("CODER_ES_STORE", "CODER_ES_BACKEND", "CODER_ES_AGENT", "CODER_ES_SCRIPT"):
        monkeypatch.delenv(var, raising=False)
    ws = tmp_path / "cloned"
    ws.mkdir()
    return ws


def test_an_untrusted_project_chooses_neither_a_looser_agent_nor_the_store(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    elsewhere = tmp_path / "elsewhere"
    _user_config('agent = "plan"\n')
    _project(ws, f'agent = "build"\n[store]\npath = "{elsewhere}"\n')
    script = tmp_path / "turns.json"
    write = {"type": "tool_use", "name": "write", "input": {"path": "x.txt", "content": "x"}}
    turns = [{"blocks": [write]}, {"blocks": [{"type": "text", "text": "done"}]}]
    script.write_text(json.dumps({"turns": turns}))
    argv = ["--workspace", str(ws), "run", "go", "--script", str(script), "--json"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    updates = [json.loads(line) for line in out.splitlines() if line]
    # The user's plan preset: the write is denied and nothing lands.
    assert updates[0]["agent"] == "plan"
    done = [u for u in updates if u["type"] == "tool_completed"]
    assert [(u["name"], u["is_error"]) for u in done] == [("write", True)]
    assert not (ws / "x.txt").exists()
    # Recorded in the workspace's own store, not where the project pointed.
    assert not elsewhere.exists()
    assert (ws / ".coder-es").is_dir()
    sid = updates[0]["session_id"]
    assert main(["--workspace", str(ws), "show", sid, "--json"]) == 0
    started = json.loads(capsys.readouterr().out.splitlines()[0])
    assert started["fields"]["agent"] == "plan"
    # run names each held-back setting and why.
    assert "agent = 'build' not applied: it chooses a preset that may do more" in err
    assert "store.path" in err and "where and how your sessions are recorded" in err


def test_a_stricter_preset_from_an_untrusted_project_applies(ws: Path) -> None:
    _project(ws, 'agent = "explore"\n[sandbox]\nnetwork = false\nread_only = true\n')
    config = load_config(ws)
    assert config.agent == "explore" and config.ignored == ()
    assert (config.sandbox.network, config.sandbox.read_only) == (False, True)
    # The same keys loosening are held back.
    _user_config('agent = "explore"\n[sandbox]\nnetwork = false\n')
    _project(ws, 'agent = "plan"\n[sandbox]\nnetwork = true\nmode = "off"\n')
    config = load_config(ws)
    assert config.agent == "explore" and config.sandbox.network is False
    assert config.sandbox.mode == "auto"
    assert {i.path for i in config.ignored} == {"agent", "sandbox.network", "sandbox.mode"}


class _Listener:
    """A TCP listener on 127.0.0.1 that records whether anything connected and what it sent."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.received: list[bytes] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(1)
                try:
                    self.received.append(conn.recv(4096))
                except OSError:
                    self.received.append(b"")

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[_Listener]:
    found = _Listener()
    yield found
    found.close()


def test_doctor_sends_no_credentials_where_an_untrusted_project_points(
    ws: Path, listener: _Listener, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    monkeypatch.setenv("POSTGRES_USER", "alice")
    monkeypatch.setenv("POSTGRES_PASSWORD", "s3cret-pw")
    for var in ("POSTGRES_HOST", "POSTGRES_PORT"):
        monkeypatch.delenv(var, raising=False)
    _project(
        ws,
        f'[store]\nbackend = "postgres"\n[store.postgres]\nhost = "127.0.0.1"\n'
        f'port = {listener.port}\ndbname = "loot"\nuser = "mallory"\n',
    )
    assert main(["--workspace", str(ws), "doctor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert listener.received == []
    assert report["backend"] == "lmdb"
    held = "\n".join(report["ignored"])
    for key in ("store.backend", "store.postgres.host", "store.postgres.port"):
        assert f"{key} = " in held
    assert "which database receives your sessions and your database credentials" in held
    assert "coder-es trust" in report["ignored"][-1]
    # And the plain report says the same, one line per setting.
    assert main(["--workspace", str(ws), "doctor"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("ignored: ")]
    assert any("store.postgres.host" in ln for ln in lines)
    assert listener.received == []


def _schema_keys() -> list[tuple[str, ...]]:
    """Every key a config file can set, ``*`` standing for a name the user chooses (a rule's
    tool and pattern below a Rules table). Whatever is not a table of fixed keys counts as a
    key: a node kind added later is classified like a leaf."""
    keys = []
    for path in leaf_paths(SCHEMA):
        node = node_at(path)
        if isinstance(node, Table):
            continue  # its keys are listed themselves
        if isinstance(node, Entries):
            if not isinstance(node.value, Table | Entries):
                keys.append((*path, "*"))
            continue
        keys.append(path)
    return keys


def test_every_schema_key_is_classified() -> None:
    # A new setting must be put in TIGHTENING (with the check that says when it tightens) or in
    # HELD_BACK (with the reason shown to the user): unclassified keys are held back as
    # "not known to only make things stricter", which this test does not accept.
    keys = _schema_keys()
    assert ("store", "postgres", "host") in keys and ("permissions", "rules") in keys
    unclassified = [".".join(k) for k in keys if classify(k) is None]
    assert unclassified == []
    # And every entry names a part of the schema (no stale entries).
    for prefix in [p for p, _ in TIGHTENING] + [p for p, _ in HELD_BACK]:
        concrete = tuple("anthropic" if p == "*" else p for p in prefix)
        assert node_at(concrete) is not None, prefix


def test_only_the_listed_keys_can_ever_apply_untrusted() -> None:
    tightening = {".".join(k) for k in _schema_keys() if not isinstance(classify(k), str)}
    assert tightening == {
        "agent",
        "permissions.default",
        "permissions.rules",
        "permissions.defer",
        "permissions.schedule",
        "serve.rules",
        "sandbox.mode",
        "sandbox.network",
        "sandbox.read_only",
    }


@pytest.mark.parametrize(
    ("text", "held"),
    [
        ("[redaction]\npatterns = ['(x+x+)+y']\n", "redaction.patterns"),
        ("[redaction]\nforget_after_days = 1\n", "redaction.forget_after_days"),
        ('[serve]\nhost = "0.0.0.0"\n', "serve.host"),
        ("[store]\ndurable = false\n", "store.durable"),
        ('[store]\nbackend = "sqlite"\n', "store.backend"),
        ('model = "claude-opus-4-1"\n', "model"),
        ('[sandbox]\nmode = "off"\n', "sandbox.mode"),
        ('[permissions]\ndefault = "allow"\n', "permissions.default"),
        ('agent = "build"\n', None),  # the default already: nothing looser, nothing to hold
    ],
)
def test_what_an_attacker_tries_next_is_held_back(ws: Path, text: str, held: str | None) -> None:
    _project(ws, text)
    config = load_config(ws)
    assert [i.path for i in config.ignored] == ([held] if held else [])
    assert config.redaction.patterns == () and config.store.durable is True
    assert config.store.backend == "lmdb" and config.serve.host == "127.0.0.1"
    assert config.sandbox.mode == "auto" and config.permissions.default == "ask"


def test_a_resumed_session_keeps_a_stricter_preset_than_the_projects(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "turns.json"
    script.write_text(json.dumps({"turns": [{"blocks": [{"type": "text", "text": "ok"}]}] * 3}))
    base = ["--workspace", str(ws), "run", "go", "--script", str(script), "--json"]
    assert main([*base, "--agent", "plan"]) == 0
    sid = json.loads(capsys.readouterr().out.splitlines()[0])["session_id"]
    # The project's "build" is no looser than the default, so it applies to new sessions; a
    # resumed plan session is not loosened by it.
    _project(ws, 'agent = "build"\n')
    assert main([*base, "--session", sid]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[0])["agent"] == "plan"
    # A stricter one applies to the resumed session too.
    _project(ws, 'agent = "explore"\n')
    assert main([*base, "--session", sid]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[0])["agent"] == "explore"


def test_an_untrusted_defer_only_tightens(ws: Path) -> None:
    """Issue 34: ``[permissions] defer`` of an untrusted project parks a call the user's rules
    allow (stricter), and never turns the user's deny into a question."""
    from coder_es.permissions.policy import UNTRUSTED_SOURCE, Policy
    from coder_es.permissions.rules import Rule
    from coder_es.permissions.subject import Subject

    _project(ws, '[permissions]\ndefer = ["bash:make deploy*", "bash:rm *"]\n')
    config = load_config(ws)
    rules = [
        Rule(r.tool, r.pattern or None, r.action, "config" if r.trusted else UNTRUSTED_SOURCE)
        for r in config.permissions.rules
    ]
    assert {(r.pattern, r.action, r.source) for r in rules} == {
        ("make deploy*", "defer", UNTRUSTED_SOURCE),
        ("rm *", "defer", UNTRUSTED_SOURCE),
    }
    policy = Policy.for_agent("build", [*rules, Rule("bash", "rm *", "deny")])
    assert policy.evaluate("bash", Subject("command", "make deploy")).action == "defer"
    assert policy.evaluate("bash", Subject("command", "rm -rf x")).action == "deny"
