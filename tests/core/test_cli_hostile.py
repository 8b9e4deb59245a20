"""Issue 18.7: no input reaches the user as a Python traceback. Every subcommand (enumerated from
the command table, so a new one is covered the day it is added) is run with hostile arguments,
one argument at a time, the others valid: unknown ids, empty, huge and non-UTF-8 strings,
negative numbers, a directory where a file is expected and the reverse, a path past PATH_MAX,
unknown options. Each must end with exit 1 or 2 and a message, never a traceback."""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from coder_es.cli.commands import COMMANDS
from coder_es.cli.main import declared_parser, main

REPO = Path(__file__).resolve().parents[2]
SCRIPT = {"turns": [{"blocks": [{"type": "text", "text": "hello"}], "stop_reason": "end_turn"}]}

# Arguments whose every value is acceptable text (a message, a title, a folder name to create):
# a hostile value there may succeed, it still must not crash. An empty option value counts as
# not given (as an empty environment variable does); a new file's name may be anything.
FREE_TEXT = {
    "prompt",
    "--title",
    "--dir",
    "--name",
    "--queue",
    "--redact-glob",
    "--kinds",
    "name",
    "query",
}
MAY_SUCCEED = {"--output": {"unknown-id", "non-utf8", "negative", "file", "missing-path"}}
# Path values are tried on positionals and on the options that take a path; the other options
# get the text values only (keeps the sweep fast).
PATH_VALUES = {"directory", "file", "missing-path", "past-PATH_MAX"}
PATH_OPTIONS = {"--output", "--script", "--store", "--workspace", "--dir"}
# Values that would make a slow command run for real: only the ones that must fail are tried.
# A label is any non-empty text: the others would label the shared session (and make a hostile
# node name valid for the cases after).
ONLY = {("demo", "--dir"): {"huge", "file", "past-PATH_MAX"}, ("label", "name"): {"empty"}}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A workspace with one recorded session, and the valid value of each argument."""
    ws = tmp_path_factory.mktemp("hostile")
    (ws / "turns.json").write_text(json.dumps(SCRIPT))
    old = os.getcwd()
    os.chdir(ws)
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC", "OPENAI"))}
        done = subprocess.run(
            [sys.executable, "-m", "coder_es.cli.main", "run", "hi", "--script", "turns.json"],
            env={**env, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            check=True,
        )
        assert "hello" in done.stdout
    finally:
        os.chdir(old)
    sid = json.loads(
        subprocess.run(
            [sys.executable, "-m", "coder_es.cli.main", "sessions", "--json"],
            cwd=ws,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )["id"]
    yield {
        "ws": str(ws),
        "session": sid[:8],
        "node": "2",
        "node_a": "2",
        "node_b": "2",
        "name": "lbl",
        "mcp_action": "list",
        "hooks_action": "list",
        "target": sid[:8],
        "path": str(ws),
        "prompt": "hi",
        "query": "hi",
        "cassettes": str(
            REPO / "coder_es" / "data" / "sessions" / "denied-permission.cassette.jsonl"
        ),
        "--format": "jsonl",
        "--output": str(ws / "out.cassette.jsonl"),
    }


def hostile_values(ws: Path) -> dict[str, str]:
    deep = str(ws / "/".join(["d" * 200] * 25))  # past PATH_MAX (4096)
    return {
        "unknown-id": "zzzz-no-such",
        "empty": "",
        "huge": "x" * 100_000,
        "non-utf8": os.fsdecode(b"caf\xe9-\xff\xfe"),
        "negative": "-1",
        "directory": str(ws / "adir"),
        "file": str(ws / "afile.txt"),
        "missing-path": str(ws / "no" / "such" / "path"),
        "past-PATH_MAX": deep,
    }


def _slots(name: str) -> tuple[list[argparse.Action], list[argparse.Action]]:
    """(positionals, options that take a value) of a command, as its parser declares them."""
    parser = declared_parser(name)
    positionals, options = [], []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.nargs == 0:
            continue
        (options if action.option_strings else positionals).append(action)
    return positionals, options


def _base(command: str, valid: dict[str, str], skip: argparse.Action | None) -> list[str]:
    """The command with its required arguments valid (leaving out the one under test)."""
    positionals, options = _slots(command)
    argv = ["--workspace", valid["ws"], command]
    for action in positionals:
        if skip is not None and action.dest == skip.dest:
            argv.append("{}")
        elif action.nargs not in ("?", "*"):
            argv.append(valid[action.dest])
    for action in options:
        if action.required and (skip is None or action.dest != skip.dest):
            argv += [action.option_strings[0], valid[action.option_strings[-1]]]
    return argv


GLOBAL = {"--workspace", "--store", "--backend"}


def cases() -> list[tuple[str, str]]:
    out = []
    for command in COMMANDS:
        positionals, options = _slots(command.name)
        for action in positionals:
            out.append((command.name, action.dest))
        for action in options:
            # The global options are the same everywhere: swept once, on `sessions`.
            if action.option_strings[-1] not in GLOBAL or command.name == "sessions":
                out.append((command.name, action.option_strings[-1]))
        out.append((command.name, "--no-such-option"))
    return out


class _Hung(Exception):
    pass


def _alarm(_sig: int, _frame: FrameType | None) -> None:
    raise _Hung


def run_in_process(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(20)
    try:
        try:
            code = main(argv)
        except SystemExit as e:  # argparse's usage errors
            code = int(e.code or 0)
    except _Hung:
        pytest.fail(f"coder-es {' '.join(a[:40] for a in argv)} did not finish in 20 s")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    out, err = capsys.readouterr()
    return code, out + err


@pytest.mark.parametrize(("command", "slot"), cases(), ids=lambda x: str(x))
def test_every_command_refuses_hostile_arguments_cleanly(
    command: str,
    slot: str,
    recorded: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)  # files a case creates (-o NAME) stay in the test's directory
    for var in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL", "CODER_ES_SCRIPT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))  # chat: end of input at once
    positionals, options = _slots(command)
    if slot == "--no-such-option":
        code, output = run_in_process([*_base(command, recorded, None), slot], capsys)
        assert code == 2, output
        assert "unrecognized arguments: --no-such-option" in output
        return
    action = next(a for a in positionals + options if slot in (a.dest, *a.option_strings))
    base = _base(command, recorded, action)
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile.txt").write_text("not a cassette, not a session\n")
    for what, value in hostile_values(tmp_path).items():
        if what not in ONLY.get((command, slot), {what}):
            continue
        if what in PATH_VALUES and action.option_strings and slot not in PATH_OPTIONS:
            continue
        if action.option_strings:
            argv = [*base, f"{action.option_strings[-1]}={value}"]
        else:
            argv = [value if a == "{}" else a for a in base]
        code, output = run_in_process(argv, capsys)
        shown = f"coder-es {command} {slot}=<{what}>: exit {code}\n{output[-2000:]}"
        assert "Traceback" not in output, shown
        may_succeed = (
            slot in FREE_TEXT
            or what == "directory"
            or (what == "empty" and action.option_strings)
            or what in MAY_SUCCEED.get(slot, ())
        )
        allowed = {0, 1, 2} if may_succeed else {1, 2}
        assert code in allowed, shown
        if code:
            assert output.strip(), shown  # a message says why


def test_an_empty_label_is_refused(
    recorded: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(recorded["ws"])
    code, output = run_in_process(["label", recorded["session"], "2", ""], capsys)
    assert code == 2
    assert "coder-es: a label needs a non-empty name" in output


def test_deps_of_a_missing_directory_is_an_error(
    recorded: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(recorded["ws"])
    code, output = run_in_process(["deps", "/nonexistent"], capsys)
    assert code == 2
    assert "coder-es: /nonexistent is not a directory" in output


# ---------------------------------------------------------------------- whole processes


def _process(args: list[bytes], cwd: str, prefix: str = "") -> subprocess.CompletedProcess[bytes]:
    entry = "from coder_es.cli.main import run; run()"
    argv = [os.fsencode(sys.executable), b"-c", entry.encode(), *args]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if prefix:  # run from a directory only a shell can reach step by step
        quoted = " ".join("'" + os.fsdecode(a).replace("'", "'\\''") + "'" for a in argv)
        return subprocess.run(["bash", "-c", f"{prefix} && exec {quoted}"], cwd=cwd, env=env,
                              capture_output=True)  # fmt: skip
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True)


def test_non_utf8_arguments_in_a_real_process(recorded: dict[str, str]) -> None:
    bad = b"caf\xe9\xff"
    for args in (
        [b"tree", bad],
        [b"show", bad, b"--json"],
        [b"deps", bad],
        [b"label", bad, bad, bad],
    ):
        done = _process(args, recorded["ws"])
        assert done.returncode == 2, done.stderr
        assert b"Traceback" not in done.stderr
        assert done.stderr.startswith(b"coder-es: ")


def test_a_working_directory_past_path_max(tmp_path: Path) -> None:
    step = "d" * 250
    prefix = f"for i in $(seq 20); do mkdir -p {step} && cd {step}; done"
    for args in ([b"tree", b"abc"], [b"doctor"]):
        done = _process(args, str(tmp_path), prefix)
        assert b"Traceback" not in done.stderr, done.stderr
        assert done.returncode in (1, 2), done.stderr
        # doctor reports it as a finding on stdout; the others say it on stderr.
        assert b"coder-es: " in done.stderr or b"problem: " in done.stdout
