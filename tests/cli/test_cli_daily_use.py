"""What a new user trips on (issue 35): typos, a bare call, a missing extra."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import Cli, script, text, tool, turn

from coder_es.cli.main import main


def test_a_bare_call_prints_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: coder-es") and "sessions" in out and "rewind" in out


@pytest.mark.parametrize(("typo", "meant"), [("sesions", "sessions"), ("tre", "tree")])
def test_a_mistyped_command_gets_a_suggestion(
    typo: str, meant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit:
        main([typo])
    err = capsys.readouterr().err
    assert exit.value.code == 2
    assert f"Did you mean '{meant}'?" in err
    assert "choose from" not in err  # not argparse's list of every command
    assert len(err.splitlines()) == 1


def test_a_mistyped_option_shows_the_subcommands_usage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit:
        main(["tree", "abc", "--jsn"])
    err = capsys.readouterr().err
    assert exit.value.code == 2
    assert err.startswith("usage: coder-es tree")
    assert "did you mean --json?" in err


@pytest.mark.parametrize(
    ("command", "module", "extra"), [("acp", "acp", "clients"), ("serve", "websockets", "clients")]
)
def test_a_missing_extra_is_one_line_naming_it(
    command: str, module: str, extra: str, tmp_path: object
) -> None:
    # A plain install (no extras): the module is absent; the command says what to install.
    code = (
        "import sys\n"
        f"sys.modules[{module!r}] = None\n"
        "from coder_es.cli.main import main\n"
        f"sys.exit(main(['--workspace', {str(tmp_path)!r}, {command!r}, '--script', 'fix_add']))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"coder-es: {command} needs the '{extra}' extra, which is not installed: "
        f"pip install 'coder-es[{extra}]' (or 'coder-es[all]')"
    ]


LONG = "a long answer " * 40  # 560 characters: wider than any terminal


def _session_with_long_text(cli: Cli, tmp_path: Path) -> str:
    s = script(
        tmp_path / "s.json",
        turn(tool("bash", command="printf 'x%.0s' $(seq 1 3000)")),
        turn(text(LONG)),
    )
    result, sid = cli.run_script("go", s)
    assert result.code == 0, result.err
    return sid


def test_show_into_a_pipe_never_wraps(cli: Cli, tmp_path: Path) -> None:
    sid = _session_with_long_text(cli, tmp_path)
    result = cli("show", sid[:8])
    events = cli("show", sid[:8], "--json").json_lines()
    # A header line and the usage line, then one line per event: nothing wrapped.
    assert len(result.out.splitlines()) == len(events) + 2


def test_show_node_prints_that_node_whole(cli: Cli, tmp_path: Path) -> None:
    sid = _session_with_long_text(cli, tmp_path)
    tree = cli("tree", sid[:8], "--json").json_lines()[0]
    nodes = {n["id"]: n for n in tree["nodes"]}
    answer = max(nodes, key=int)
    shown = cli("show", sid[:8], answer)
    assert shown.code == 0, shown.err
    assert LONG.strip() in shown.out
    assert "…" not in shown.out
    bash_result = next(i for i, n in nodes.items() if n["kind"] == "tool_result")
    output = cli("show", sid[:8], bash_result).out
    assert "x" * 3000 in output  # the whole output, not the capped one in the listing
    as_json = cli("show", sid[:8], answer, "--json").json_lines()
    assert as_json[0]["version"] == int(answer)


def test_export_takes_its_format_from_the_file_name_and_says_what_it_wrote(
    cli: Cli, tmp_path: Path
) -> None:
    sid = _session_with_long_text(cli, tmp_path)
    target = tmp_path / "t.html"
    result = cli("export", sid[:8], "-o", str(target))
    assert result.code == 0, result.err
    assert target.read_text().lstrip().lower().startswith("<!doctype html")
    assert f"wrote {target} (html" in result.err
    unknown = cli("export", sid[:8], "-o", str(tmp_path / "t.txt"))
    assert unknown.code == 2 and "needs --format" in unknown.err


def test_forget_asks_at_a_terminal(repo: Path, tmp_path: Path) -> None:
    import os
    import pty

    from cli_helpers import run_process, subprocess_env

    s = script(tmp_path / "s.json", turn(text("hello")))
    assert run_process(["run", "hi", "--script", s], repo).code == 0
    main_fd, terminal = pty.openpty()
    with os.fdopen(main_fd, "rb", buffering=0) as screen:
        process = subprocess.Popen(
            [sys.executable, "-m", "coder_es.cli.main", "forget", "--all"],
            cwd=repo,
            env=subprocess_env(),
            stdin=terminal,
            stdout=terminal,
            stderr=terminal,
        )
        os.close(terminal)
        seen = b""
        while b"[y/N]" not in seen:
            seen += screen.read(1024)
        os.write(main_fd, b"n\n")
        assert process.wait(timeout=120) == 1
        rest = b""
        try:
            while chunk := screen.read(1024):
                rest += chunk
        except OSError:  # the terminal closed with the process
            pass
    assert b"cannot be undone" in seen
    assert b"nothing forgotten" in rest


def test_the_wrong_backend_names_the_store_that_is_there(tmp_path: Path) -> None:
    from cli_helpers import git_repo, run_process

    repo = git_repo(tmp_path / "r", {"a.txt": "a\n"})
    s = script(tmp_path / "s.json", turn(text("hello")))
    env = {"CODER_ES_BACKEND": "lmdb", "CODER_ES_STORE": ""}
    assert run_process(["run", "hi", "--script", s], repo, **env).code == 0
    wrong = run_process(["--backend", "sqlite", "sessions"], repo, **env)
    said = wrong.out + wrong.err
    assert "the store there is lmdb (leave out --backend, or pass --backend lmdb)" in said


def test_doctor_with_a_broken_project_config_names_the_file_and_its_trust(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = tmp_path / "ws"
    (ws / ".coder-es").mkdir(parents=True)
    (ws / ".coder-es" / "config.toml").write_text("permissions = 3\n")
    code = main(["--workspace", str(ws), "doctor"])
    out = capsys.readouterr().out
    assert code == 1
    assert f"config_files: {ws / '.coder-es' / 'config.toml'}" in out
    assert "trust: untrusted" in out
    # No store yet: said so, and nothing about the durability of a store that is not there.
    assert "(none yet:" in out and "durable" not in out
    # The sandbox reads as a sentence, not a flattened dict.
    line = next(x for x in out.splitlines() if "shell_sandbox:" in x)
    assert "mode " not in line and ", why" not in line


def test_read_only_commands_run_with_the_defaults_and_a_warning(
    cli: Cli, repo: Path, tmp_path: Path
) -> None:
    s = script(tmp_path / "s.json", turn(text("hello")))
    result, sid = cli.run_script("hi", s)
    assert result.code == 0
    user = Path.home() / ".config" / "coder-es" / "config.toml"
    user.parent.mkdir(parents=True, exist_ok=True)
    user.write_text("agnet = 'plan'\n")  # one bad key
    for args in (["sessions"], ["tree", sid[:8]], ["show", sid[:8]]):
        shown = cli(*args)
        assert shown.code == 0, shown.err
        assert "warning: the configuration has problems" in shown.err
        assert "agnet" in shown.err
    assert cli("run", "again", "--script", s).code == 2  # a turn needs a valid configuration
