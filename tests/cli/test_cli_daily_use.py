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
