"""Issue 19.3: the command line imports only what the chosen command uses (bench/cli.py
measures the time; these tests keep the heavy imports out of the start-up path)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from coder_es.cli import commands
from coder_es.cli.commands import COMMANDS

REPO = Path(__file__).resolve().parents[2]
HEAVY = (
    "eventsourcing",
    "lmdb",
    "httpx",
    "rich",
    "tree_sitter",
    "msgspec",
    "coder_es.providers",
    "coder_es.application",
    "coder_es.workspace.merge",
    "merge3",
    "projections",
    "replay",
)
PROBE = """
import json, sys
from coder_es.cli.main import main
try:
    code = main(sys.argv[1:])
except SystemExit as e:
    code = e.code
sys.stdout.flush()
redaction = sys.modules.get("coder_es.redaction")
compiled = redaction._builtin_rule.cache_info().currsize if redaction else 0
report = {"code": code, "modules": sorted(sys.modules), "compiled_shapes": compiled}
print(json.dumps(report), file=sys.stderr)
"""
# What a command that only reads the store never needs (issue 19.3: each of these cost start-up
# time before): the schema, TOML, trust and hints of a configuration without files or problems,
# the SQLite module under LMDB, the lease's socket module (hostname, taken by writers), the
# blob store's diff module (deltas are computed when writing).
READER_NEVER = (
    "tomllib",
    "coder_es.config.schema",
    "coder_es.config.trust",
    "coder_es.config.untrusted",
    "difflib",
    "sqlite3",
    "socket",
)


def probe(args: list[str], cwd: Path) -> dict[str, Any]:
    # No user configuration: this machine's own must not decide what a run imports.
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_CONFIG_HOME": str(cwd / "no-config")}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    report: dict[str, Any] = json.loads(done.stderr.strip().splitlines()[-1])
    return report


def imported_by(args: list[str], cwd: Path) -> tuple[int, set[str]]:
    report = probe(args, cwd)
    return int(report["code"] or 0), set(report["modules"])


def absent(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if m in names or m.startswith(tuple(n + "." for n in names)))


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY or m.startswith(HEAVY))


def test_help_imports_nothing_heavy(tmp_path: Path) -> None:
    code, modules = imported_by(["--help"], tmp_path)
    assert code == 0
    assert heavy(modules) == []
    # Not even the handler modules or the configuration.
    assert not [m for m in modules if m.startswith(("coder_es.config", "coder_es.cli.tree"))]


def test_sessions_and_tree_import_only_what_they_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "turns.json"
    script.write_text(
        json.dumps(
            {"turns": [{"blocks": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn"}]}
        )
    )
    subprocess.run(
        [sys.executable, "-m", "coder_es.cli.main", "run", "x", "--script", str(script)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        check=True,
    )
    code, modules = imported_by(["sessions"], tmp_path)
    assert code == 0
    # The store (eventsourcing, lmdb) and nothing of the agent, the providers or rich.
    assert "lmdb" in modules
    unexpected = {"httpx", "rich", "tree_sitter", "coder_es.providers", "merge3", "projections"}
    assert [m for m in heavy(modules) if m.split(".")[0] in unexpected or m in unexpected] == []
    assert not [m for m in modules if m.startswith(("coder_es.providers", "coder_es.agent"))]
    assert absent(modules, READER_NEVER) == []

    sid = json.loads(
        subprocess.run(
            [sys.executable, "-m", "coder_es.cli.main", "sessions", "--json"],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            check=True,
            text=True,
        ).stdout
    )["id"]
    report = probe(["tree", sid[:8]], tmp_path)
    assert report["code"] == 0
    modules = set(report["modules"])
    assert "projections.tree" in modules
    for name in ("httpx", "tree_sitter", "merge3", "coder_es.providers", "coder_es.agent"):
        assert not [m for m in modules if m == name or m.startswith(name + ".")], name
    assert absent(modules, READER_NEVER) == []
    # `tree` reads: none of the branching machinery (restoring files, its thread pool, the
    # progress bars) and, printing into a pipe, none of rich's console (coder_es.cli.plain).
    moving = ("coder_es.branching", "coder_es.workspace.restore", "coder_es.cli.progress")
    assert absent(modules, (*moving, "concurrent.futures")) == []
    assert absent(modules, ("rich.console", "rich.markup", "rich.text")) == []
    # Nothing is redacted by reading: the builtin credential shapes are never compiled.
    assert report["compiled_shapes"] == 0


def test_every_row_of_the_table_names_a_handler() -> None:
    names = [c.name for c in COMMANDS] + [a for c in COMMANDS for a in c.aliases]
    assert len(names) == len(set(names))
    for command in COMMANDS:
        assert callable(command.handler()), command.target


def test_the_tables_copies_of_choices_agree_with_their_sources() -> None:
    from coder_es.audit.export import FORMATS
    from coder_es.config.catalog import AGENTS, PROVIDERS
    from coder_es.data import SESSIONS
    from coder_es.fleet.queue import DEFAULT_QUEUE
    from coder_es.permissions.presets import PRESETS
    from coder_es.store.config import BACKENDS
    from projections.context.builder import DEFAULT_BUDGET
    from replay.cassette import SUFFIX
    from replay.engine import MODES

    assert commands.EXPORT_FORMATS == FORMATS
    assert commands.REPLAY_MODES == MODES
    assert commands.CASSETTE_SUFFIX == SUFFIX
    assert commands.DEFAULT_BUDGET == DEFAULT_BUDGET
    assert commands.DEFAULT_QUEUE == DEFAULT_QUEUE
    assert commands.BACKEND_CHOICES == BACKENDS
    assert commands.PROVIDERS == PROVIDERS
    assert commands.AGENTS == AGENTS
    from coder_es.cli.tree import TASK_TOOL_NAME
    from coder_es.permissions.subagents import TASK_TOOL

    assert TASK_TOOL_NAME == TASK_TOOL
    assert set(commands.AGENTS) == set(PRESETS)
    assert (SESSIONS / f"{commands.DEMO_CASSETTE}{SUFFIX}").is_file()


def test_pending_imports_neither_asyncio_rich_nor_the_agents_settings(tmp_path: Path) -> None:
    """Issue 35: `pending` reads the index of waiting sessions and prints plain lines; the
    event loop, rich's console, the origin's socket and the loop's state (with the agent's
    settings) belong to the commands that answer or continue a turn."""
    script = tmp_path / "turns.json"
    script.write_text(
        json.dumps(
            {"turns": [{"blocks": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn"}]}
        )
    )
    subprocess.run(
        [sys.executable, "-m", "coder_es.cli.main", "run", "x", "--script", str(script)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        check=True,
    )
    # The first `pending` folds the session into the index; the second reads the index alone.
    assert probe(["pending"], tmp_path)["code"] in (0, None)
    report = probe(["pending"], tmp_path)
    assert report["code"] in (0, None)
    modules = set(report["modules"])
    unexpected = ("asyncio", "rich", "coder_es.agent", "coder_es.providers", "tree_sitter")
    assert absent(modules, unexpected) == []
    assert absent(modules, READER_NEVER) == []


def test_context_does_not_load_the_event_loop(tmp_path: Path) -> None:
    """Issue 35: `context` builds the tool registry for the tools' definitions only; the tools
    import asyncio (with ssl, socket, concurrent.futures) where they run."""
    script = tmp_path / "turns.json"
    script.write_text(
        json.dumps(
            {"turns": [{"blocks": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn"}]}
        )
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    main = [sys.executable, "-m", "coder_es.cli.main"]
    subprocess.run([*main, "run", "x", "--script", str(script)], cwd=tmp_path, env=env, check=True)
    listed = subprocess.run(
        [*main, "sessions", "--json"], cwd=tmp_path, env=env, capture_output=True, check=True
    )
    sid = json.loads(listed.stdout)["id"]
    report = probe(["context", sid[:8]], tmp_path)
    assert report["code"] in (0, None)
    modules = set(report["modules"])
    assert "coder_es.tools.bash" in modules  # the registry is built
    assert absent(modules, ("asyncio", "ssl", "concurrent.futures")) == []


def test_diff_reads_without_the_branching_machinery(tmp_path: Path) -> None:
    """Issue 35: `diff` only reads the tree and file projections (projections.node_diff); the
    branching commands' file restoration, its thread pool and the progress bars are not loaded."""
    script = tmp_path / "turns.json"
    script.write_text(
        json.dumps(
            {"turns": [{"blocks": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn"}]}
        )
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    main = [sys.executable, "-m", "coder_es.cli.main"]
    subprocess.run([*main, "run", "x", "--script", str(script)], cwd=tmp_path, env=env, check=True)
    listed = subprocess.run(
        [*main, "sessions", "--json"], cwd=tmp_path, env=env, capture_output=True, check=True
    )
    sid = json.loads(listed.stdout)["id"]
    shown = subprocess.run(
        [*main, "tree", sid[:8], "--json"], cwd=tmp_path, env=env, capture_output=True, check=True
    )
    nodes = [n["id"] for n in json.loads(shown.stdout)["nodes"]]
    report = probe(["diff", sid[:8], nodes[0], nodes[-1]], tmp_path)
    assert report["code"] in (0, None)
    modules = set(report["modules"])
    assert "projections.node_diff" in modules
    moving = ("coder_es.branching", "coder_es.workspace.restore", "coder_es.cli.progress")
    assert absent(modules, (*moving, "concurrent.futures")) == []


GC_PROBE = """
import gc, json, sys
from coder_es.cli import commands
from coder_es.cli.main import run

def handler(args, ctx):
    print(json.dumps({"enabled": gc.isenabled(), "frozen": gc.get_freeze_count()}))
    return 0

commands.Command.handler = lambda self: handler
sys.argv = ["coder-es", *sys.argv[1:]]
run()
"""


@pytest.mark.parametrize("command", [["sessions"], ["run", "hello"]])
def test_the_command_runs_with_the_collector_on_after_a_start_up_without_it(
    tmp_path: Path, command: list[str]
) -> None:
    """Start-up runs with the cyclic collector off; what it made is frozen and the collector
    is on again before the command's own work (a long ``run`` or ``serve`` frees its cycles
    as ever)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_CONFIG_HOME": str(tmp_path / "no-config")}
    done = subprocess.run(
        [sys.executable, "-c", GC_PROBE, *command],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["enabled"] is True
    assert seen["frozen"] > 10_000  # the modules' objects, out of the collector's sight
