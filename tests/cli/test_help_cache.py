"""Issue 35: ``coder-es --help`` prints the text argparse printed last time (coder_es.cli.helpcache)
without building the parser, and that text is always the one the parser would print now."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from coder_es.cli import helpcache
from coder_es.userdirs import user_cache_dir

REPO = Path(__file__).resolve().parents[2]
# The installed script's entry, and what it imported (argparse is the parser being built).
ENTRY = """
import json, sys
from coder_es.cli.main import run
try:
    run()
except SystemExit as e:
    code = e.code
sys.stdout.flush()
print(json.dumps({"code": code, "argparse": "argparse" in sys.modules}), file=sys.stderr)
"""
PARSER = "from coder_es.cli.main import build_parser; print(build_parser().format_help(), end='')"


def env_for(cache: Path, columns: int = 100) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(cache)}
    env["COLUMNS"] = str(columns)
    return env


def cli(args: list[str], env: dict[str, str]) -> tuple[str, bool]:
    done = subprocess.run(
        [sys.executable, "-c", ENTRY, *args], env=env, capture_output=True, text=True, check=True
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    assert report["code"] in (0, None)
    return done.stdout, report["argparse"]


def parser_help(env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-c", PARSER], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout


@pytest.mark.parametrize("args", [["--help"], ["-h"], []])
def test_the_kept_help_is_the_parsers_and_skips_building_it(
    tmp_path: Path, args: list[str]
) -> None:
    env = env_for(tmp_path / "cache")
    expected = parser_help(env)
    assert expected.startswith("usage: coder-es")
    first, built = cli(args, env)
    assert (first, built) == (expected, True)
    second, built = cli(args, env)
    assert (second, built) == (expected, False)


def test_another_width_or_an_edited_table_is_not_served_the_kept_text(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cli(["--help"], env_for(cache, 120))
    narrow = env_for(cache, 50)
    out, built = cli(["--help"], narrow)
    assert (out, built) == (parser_help(narrow), True)
    assert out != parser_help(env_for(cache, 120))
    # The kept text names what it was made for: a different key (another version of the
    # code, another locale) is rebuilt, whatever the text says.
    kept = Path(helpcache.help_file({"XDG_CACHE_HOME": str(cache)}))
    key, _, _ = kept.read_text().partition("\n")
    kept.write_text(f"{key}x\nusage: stale\n")
    out, built = cli(["--help"], narrow)
    assert (out, built) == (parser_help(narrow), True)
    assert "stale" not in kept.read_text()


def test_a_kept_text_others_can_write_is_not_used(tmp_path: Path) -> None:
    env = env_for(tmp_path / "cache")
    cli(["--help"], env)
    kept = Path(helpcache.help_file(env))
    key, _, _ = kept.read_text().partition("\n")
    kept.write_text(f"{key}\nusage: planted by someone else\n")
    kept.chmod(0o666)
    out, built = cli(["--help"], env)
    assert (out, built) == (parser_help(env), True)


def test_the_width_and_the_place_agree_with_shutil_and_userdirs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for columns in ("33", "0", "x", None):
        if columns is None:
            monkeypatch.delenv("COLUMNS", raising=False)
        else:
            monkeypatch.setenv("COLUMNS", columns)
        assert helpcache.terminal_columns() == shutil.get_terminal_size().columns
    for environ in ({"XDG_CACHE_HOME": str(tmp_path)}, {"HOME": str(tmp_path)}):
        assert helpcache.help_file(environ) == str(user_cache_dir(environ) / "help" / "top.txt")
