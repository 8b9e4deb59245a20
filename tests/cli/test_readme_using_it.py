"""Every command in the README's "Using it" section runs, as written, with the exit code it
promises.

The block is parsed from README.md, so a command added there is run here. Placeholders take real
values from a session recorded by the README's own offline ``run`` line: SESSION, NODE, NODE_A,
NODE_B, NAME, FILE, DATE. Alternatives are all run (``--format jsonl|otel|md|html``), optional parts
with and without (``[--new-session]``). What cannot run as written is said here, with the reason:

- ``export ANTHROPIC_API_KEY=...`` is not a coder-es command; without a key, the ``run`` line that
  needs one runs through ``CODER_ES_SCRIPT`` (the provider choice falls back to it), with a
  script that edits notes.md (PATH), so that ``show`` has a file to show.
- ``serve --port 8765`` runs on port 0 (another test may hold 8765), until it listens.
- ``replay ... --mode live`` replays every bundled cassette for real (most of a minute): it runs
  in the slow suite (``pytest -m slow``).
- ``worker`` needs PostgreSQL: it runs against it briefly, or is skipped when it is unreachable.
"""

from __future__ import annotations

import itertools
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from backends import PG
from cli_helpers import REPO_ROOT, Cli, script, subprocess_env, text, tool, turn

README = REPO_ROOT / "README.md"
SLOW = ("--mode", "live")


def using_it_lines() -> list[str]:
    text = README.read_text()
    section = text.split("## Using it", 1)[1]
    block = section.split("```bash", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def commands(line: str) -> list[str]:
    """The coder-es commands of one README line (comments dropped, `  /  ` and runs of spaces
    separate several)."""
    line = re.split(r"\s{2,}#", line, maxsplit=1)[0].strip()
    parts = re.split(r"\s+/\s+|\s{2,}(?=coder-es )", line)
    out = []
    for part in parts:
        part = part.strip()
        if not part:
            continue
        out.append(part if part.startswith("coder-es") else f"coder-es {part}")
    return out


def _alternatives(words: list[str]) -> list[list[str]]:
    """Each way of reading plain words, ``a|b`` being either (``--flag|--other`` too)."""
    options = [w.split("|") if "|" in w and w[0] not in "'\"" else [w] for w in words]
    return [list(c) for c in itertools.product(*options)]


def variants(command: str) -> Iterator[list[str]]:
    """Every way of running a command: each alternative of ``a|b``, optional ``[x]`` parts
    with and without."""
    choices: list[list[list[str]]] = []
    for token in re.findall(r"\[[^\]]+\]|'[^']*'|\"[^\"]*\"|\S+", command):
        if token.startswith("[") and token.endswith("]"):
            choices.append([[], *_alternatives(token[1:-1].split())])
        else:
            choices.append(_alternatives(shlex.split(token)))
    for combination in itertools.product(*choices):
        yield [word for part in combination for word in part]


def all_commands() -> list[list[str]]:
    found = []
    for line in using_it_lines():
        if not line.lstrip().startswith("coder-es"):
            continue
        for command in commands(line):
            found.extend(variants(command))
    return found


def test_the_section_is_parsed() -> None:
    found = [" ".join(c) for c in all_commands()]
    assert "coder-es sessions" in found
    assert "coder-es rewind SESSION NODE --files" in found
    assert "coder-es export SESSION --format html -o FILE" in found
    assert "coder-es fork SESSION NODE --new-session" in found
    assert "coder-es serve --port 8765" in found
    assert "coder-es show SESSION NODE PATH" in found
    assert "coder-es diff SESSION NODE_A NODE_B --stat" in found
    assert len(found) >= 25


@pytest.fixture
def env(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    edit = script(
        tmp_path / "edit.json",
        turn(tool("read", path="notes.md")),
        turn(tool("edit", path="notes.md", old_string="b\n", new_string="fixed\n")),
        turn(text("fixed")),
    )
    monkeypatch.setenv("CODER_ES_SCRIPT", edit)
    return repo


def _fill(words: list[str], values: dict[str, str]) -> list[str]:
    out = []
    for word in words[1:]:  # without "coder-es"
        if word in values:
            out.append(values[word])
        elif word.startswith("fixtures/"):
            out.append(str(REPO_ROOT / word))
        else:
            out.append(word)
    return out


def _briefly(
    args: list[str], repo: Path, *, until: str | Callable[[], bool], **env: str
) -> tuple[int, str]:
    """Start a long-running command, wait until it says ``until`` on stderr (or ``until()``
    holds), then Ctrl-C it."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "coder_es.cli.main", *args],
        cwd=repo,
        env=subprocess_env(**env),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    seen = ""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if isinstance(until, str):
            if until in seen:
                break
            seen += proc.stderr.readline()
        elif until():
            break
        else:
            time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    return proc.returncode, seen + err


def test_every_command_of_using_it_runs(env: Path, cli: Cli, tmp_path: Path) -> None:
    repo = env
    values: dict[str, str] = {"NAME": "readme-label", "PATH": "notes.md", "DATE": "2020-01-01"}
    ran: list[str] = []
    for words in all_commands():
        shown = " ".join(words)
        if words[1] in ("chat", "acp", "serve", "worker") or tuple(words[-2:]) == SLOW:
            continue  # below
        args = _fill(words, values)
        args = [str(tmp_path / f"out-{len(ran)}") if a == "FILE" else a for a in args]
        args = [str(tmp_path / a) if a.endswith(".cassette.jsonl") else a for a in args]
        r = cli(*args)
        assert r.code == 0, f"{shown}: exit {r.code}\n{r.out}\n{r.err}"
        assert "Traceback" not in r.err, shown
        ran.append(shown)
        if words[1] == "run" and "SESSION" not in values:
            sid = cli("sessions", "--json").json_lines()[0]["id"]
            tree = cli("tree", sid, "--json").json_lines()[0]
            nodes = [n["id"] for n in tree["nodes"]]
            values.update(SESSION=sid, NODE=nodes[1], NODE_A=nodes[0], NODE_B=nodes[-1])
    assert "SESSION" in values and len(ran) >= 20

    # Interactive and long-running ones, briefly.
    chat = subprocess.run(
        [sys.executable, "-m", "coder_es.cli.main", "chat"],
        cwd=repo,
        env=subprocess_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert chat.returncode == 0, chat.stderr
    acp = subprocess.run(
        [sys.executable, "-m", "coder_es.cli.main", "acp"],
        cwd=repo,
        env=subprocess_env(),
        input="",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert acp.returncode == 0, acp.stderr
    code, err = _briefly(["serve", "--port", "0"], repo, until="listening on ws://")
    assert "listening on ws://127.0.0.1:" in err and "Traceback" not in err
    assert code in (0, 130), err


def test_worker_runs_against_postgres(env: Path, pg_schema: str) -> None:
    import psycopg

    settings = {**PG, "POSTGRES_SCHEMA": pg_schema, "CODER_ES_BACKEND": "postgres"}

    def registered() -> bool:
        conninfo = {k: PG[f"POSTGRES_{k.upper()}"] for k in ("dbname", "host", "port", "user")}
        with psycopg.connect(**conninfo, autocommit=True) as conn:
            found = conn.execute(
                "SELECT 1 FROM information_schema.tables "
                "WHERE table_schema = %s AND table_name = 'procrastinate_workers'",
                (pg_schema,),
            ).fetchone()
            if found is None:
                return False
            row = conn.execute(f"SELECT count(*) FROM {pg_schema}.procrastinate_workers")
            count = row.fetchone()
            return bool(count and count[0])

    code, err = _briefly(["worker"], env, until=registered, **settings)
    assert "Traceback" not in err, err
    assert code in (0, 130), err


@pytest.mark.slow
def test_replay_live_of_the_bundled_sessions(env: Path, cli: Cli) -> None:
    lines = [c for c in all_commands() if tuple(c[-2:]) == SLOW]
    assert lines
    for words in lines:
        r = cli(*_fill(words, {}))
        assert r.code == 0, r.out
