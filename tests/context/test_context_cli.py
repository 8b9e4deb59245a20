"""``coder-es deps`` and ``coder-es context``, run as a user runs them."""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from backends import cli_store_args, cli_store_env
from context_helpers import Recorder

from coder_es.application import CoderApp
from coder_es.cli.main import main
from coder_es.store.config import StoreConfig


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


def _cli(ws: Path, *args: str, store: StoreConfig | None = None) -> Ran:
    where = cli_store_args(store) if store is not None else ["--backend", "sqlite"]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["--workspace", str(ws), *where, *args])
        except SystemExit as e:  # argparse rejects bad usage this way
            code = int(e.code or 0)
    return Ran(code, out.getvalue(), err.getvalue())


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "pkg").mkdir(parents=True)
    (ws / "pkg" / "__init__.py").write_text("")
    (ws / "pkg" / "a.py").write_text("from pkg import b\nimport os\n\ndef run():\n    b.go()\n")
    (ws / "pkg" / "b.py").write_text("from pkg.c import base\n\ndef go():\n    base()\n")
    (ws / "pkg" / "c.py").write_text("def base():\n    return 1\n")
    return ws


def test_deps_lists_each_file_with_its_direct_dependencies(workspace: Path) -> None:
    ran = _cli(workspace, "deps")
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    at = lines.index("pkg/a.py")
    assert lines[at + 1] == "  -> pkg/b.py"
    assert "pkg/c.py" in lines
    assert lines[-1].endswith("dependencies")


def test_deps_json_has_nodes_and_edges_for_a_given_path(workspace: Path, tmp_path: Path) -> None:
    ran = _cli(tmp_path, "deps", str(workspace), "--json")
    assert ran.returncode == 0, ran.stderr
    doc = json.loads(ran.stdout)
    assert {"source": "pkg/a.py", "target": "pkg/b.py"} in doc["edges"]
    assert {"source": "pkg/b.py", "target": "pkg/c.py"} in doc["edges"]
    assert {n["id"] for n in doc["nodes"]} >= {"pkg/a.py", "pkg/b.py", "pkg/c.py"}


def test_deps_of_a_missing_directory_is_bad_usage(tmp_path: Path) -> None:
    ran = _cli(tmp_path, "deps", str(tmp_path / "nope"))
    assert ran.returncode == 2 and "not a directory" in ran.stderr


@pytest.fixture
def store(persistent_store_config: StoreConfig, monkeypatch: pytest.MonkeyPatch) -> StoreConfig:
    """Each backend the CLI can reopen; the session is recorded there before the CLI runs."""
    for key, value in cli_store_env(persistent_store_config).items():
        monkeypatch.setenv(key, value)
    return persistent_store_config


def _session(ws: Path, store: StoreConfig) -> str:
    app = CoderApp(store)
    r = Recorder.start(app, workspace=str(ws))
    r.user("make run() log something")
    content = (ws / "pkg" / "a.py").read_bytes()
    r.step(
        [("read", {"path": "pkg/a.py"}, "x" * 30_000)], files={0: [("pkg/a.py", content, "read")]}
    )
    r.step(
        [("edit", {"path": "pkg/a.py"}, "ok")],
        files={0: [("pkg/a.py", content + b"    print('ran')\n", "edit")]},
    )
    r.answer("Done: run() prints now.")
    sid = str(r.session_id)
    app.close()
    return sid


def test_context_json_shows_parts_files_related_code_and_the_request(
    workspace: Path, store: StoreConfig
) -> None:
    sid = _session(workspace, store)
    ran = _cli(workspace, "context", sid[:8], "--json", store=store)
    assert ran.returncode == 0, ran.stderr
    doc = json.loads(ran.stdout)
    parts = {p["name"]: p["tokens"] for p in doc["parts"]}
    assert list(parts) == [
        "system",
        "instructions",
        "tools",
        "summaries",
        "messages",
        "files",
        "related",
    ]
    assert sum(parts.values()) == doc["tokens"] <= doc["budget"] == 100_000
    assert parts["tools"] > 0 and parts["files"] > 0 and parts["related"] > 0
    assert [f["path"] for f in doc["files"]] == ["pkg/a.py"]
    assert "pkg/b.py" in doc["related"]
    assert doc["request"]["messages"][0]["content"][0]["text"] == "make run() log something"


def test_context_with_a_small_budget_condenses_and_says_so(
    workspace: Path, store: StoreConfig
) -> None:
    sid = _session(workspace, store)
    ran = _cli(workspace, "context", sid, "--budget", "1500", store=store)
    assert ran.returncode == 0, ran.stderr
    assert "of 1500 tokens" in ran.stdout
    for part in ("system", "tools", "summaries", "messages", "files", "related"):
        assert part in ran.stdout
    small = json.loads(
        _cli(workspace, "context", sid, "--budget", "1500", "--json", store=store).stdout
    )
    assert small["tokens"] <= 1500 and small["trimmed"]


def test_context_rejects_a_budget_too_small_or_an_unknown_session(
    workspace: Path, store: StoreConfig
) -> None:
    sid = _session(workspace, store)
    ran = _cli(workspace, "context", sid, "--budget", "50", store=store)
    assert ran.returncode == 2 and "too small" in ran.stderr
    assert _cli(workspace, "context", sid, "--budget", "0", store=store).returncode == 2
    assert _cli(workspace, "context", "ffffffff", store=store).returncode == 2


def test_context_shows_the_tools_of_the_agent_in_force(workspace: Path, store: StoreConfig) -> None:
    """The tools come from the session's settings in force (``SettingsChanged``), as the loop
    offers them, not from the agent it started with (issue 36.1)."""
    sid = _session(workspace, store)

    def tools() -> list[str]:
        ran = _cli(workspace, "context", sid, "--json", store=store)
        assert ran.returncode == 0, ran.stderr
        return [t["name"] for t in json.loads(ran.stdout)["request"]["tools"]]

    assert "edit" in tools()
    app = CoderApp(store)
    app.update(
        app.resolve_session(sid),
        lambda s: s.change_settings(agent="plan", provider="p", model="m2", context_budget=9),
    )
    app.close()
    named = tools()
    assert "edit" not in named and "write" not in named and "read" in named
