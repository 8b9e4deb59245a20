"""The tree, diff, fork, checkout, rewind and label commands, run as a user runs them."""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from tree_sim import Agent

from coder_es.application import CoderApp
from coder_es.cli.main import main
from coder_es.store.config import StoreConfig

LINES = b"".join(b"line %d\n" % i for i in range(1, 9))


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


def _cli(ws: Path, *args: str) -> Ran:
    """The command line in-process (``main`` is what the ``coder-es`` script calls)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["--workspace", str(ws), "--backend", "sqlite", *args])
        except SystemExit as e:  # argparse rejects bad usage this way
            code = int(e.code or 0)
    return Ran(code, out.getvalue(), err.getvalue())


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[Path, str, dict[str, str]]:
    ws = tmp_path / "ws"
    ws.mkdir()
    app = CoderApp(StoreConfig(backend="sqlite", path=ws / ".coder-es"))
    session = app.start_session(workspace=str(ws), title="demo")
    agent = Agent(app, ws, session.id)
    n = {"ask": agent.user_message("write the file")}
    n["write"] = agent.model_edit({"a.txt": LINES})
    n["more"] = agent.user_message("change line 4")
    n["edit"] = agent.model_edit({"a.txt": LINES.replace(b"line 4\n", b"line 4 agent\n")})
    app.close()
    return ws, str(session.id), n


def test_tree_shows_branches_labels_files_and_head(
    recorded: tuple[Path, str, dict[str, str]],
) -> None:
    ws, sid, n = recorded
    assert _cli(ws, "label", sid[:8], n["write"], "first-version").returncode == 0
    assert _cli(ws, "fork", sid[:8], n["ask"]).returncode == 0
    out = _cli(ws, "tree", sid[:8])
    assert out.returncode == 0, out.stderr
    assert "[first-version]" in out.stdout and "files: a.txt" in out.stdout
    assert f"{n['ask']} user <- HEAD write the file" in out.stdout
    data = json.loads(_cli(ws, "tree", sid, "--json").stdout)
    assert data["head"] == n["ask"] and data["labels"] == {"first-version": n["write"]}
    node = next(x for x in data["nodes"] if x["id"] == n["edit"])
    assert node["files_changed"] == ["a.txt"] and node["kind"] == "tool_result"
    assert (ws / "a.txt").exists() is False  # the fork brought the files back to the node


def test_checkout_conflict_exits_1_and_keeps_the_user_file(
    recorded: tuple[Path, str, dict[str, str]],
) -> None:
    ws, sid, n = recorded
    mine = LINES.replace(b"line 4\n", b"line 4 user\n")
    (ws / "a.txt").write_bytes(mine)
    out = _cli(ws, "checkout", sid[:8], n["write"], "--json")
    assert out.returncode == 1, out.stderr
    report = json.loads(out.stdout)
    assert report["conflicts"] == ["a.txt"] and report["node"] == n["write"]
    assert (ws / "a.txt").read_bytes() == mine


def test_rewind_modes_and_diff(recorded: tuple[Path, str, dict[str, str]]) -> None:
    ws, sid, n = recorded
    out = _cli(ws, "rewind", sid[:8], n["more"], "--files")
    assert out.returncode == 0, out.stderr
    assert (ws / "a.txt").read_bytes() == LINES
    out = _cli(ws, "rewind", sid[:8], n["ask"], "--conversation", "--json")
    assert json.loads(out.stdout)["node"] == n["ask"]
    assert (ws / "a.txt").read_bytes() == LINES
    assert _cli(ws, "checkout", sid[:8], n["edit"]).returncode == 0
    assert b"line 4 agent" in (ws / "a.txt").read_bytes()
    # `switch` is the same command.
    assert _cli(ws, "switch", sid[:8], n["write"]).returncode == 0
    assert (ws / "a.txt").read_bytes() == LINES
    assert _cli(ws, "switch", sid[:8], n["edit"]).returncode == 0
    diff = json.loads(_cli(ws, "diff", sid[:8], n["write"], n["edit"], "--json").stdout)
    assert [f["path"] for f in diff["files"]] == ["a.txt"]
    assert diff["only_b"][0]["node"] == n["more"]


def test_bad_usage_exits_2(recorded: tuple[Path, str, dict[str, str]]) -> None:
    ws, sid, n = recorded
    assert _cli(ws, "checkout", sid[:8], "no-such-node").returncode == 2
    assert _cli(ws, "checkout", "ffffffff", n["ask"]).returncode == 2
    assert _cli(ws, "rewind", sid[:8], n["ask"], "--files", "--conversation").returncode == 2
    _cli(ws, "fork", sid[:8], n["ask"])
    off_branch = _cli(ws, "rewind", sid[:8], n["edit"])
    assert off_branch.returncode == 2 and "not on the path" in off_branch.stderr
    other = ws.parent / "elsewhere"
    other.mkdir()
    elsewhere = _cli(other, "--store", str(ws / ".coder-es"), "checkout", sid[:8], n["ask"])
    assert elsewhere.returncode == 2 and "belongs to the workspace" in elsewhere.stderr
