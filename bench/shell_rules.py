"""Shell-rule benchmark: what reading a command line with the shell grammar costs per bash call.

Each figure is a median over several runs of a batch of distinct command lines (the parse cache
never hits), printed with ratios against baselines measured in the same process:

- ``parse_shell`` (every simple command and path of a line) against tree-sitter-bash's own parse
  of the same bytes (the floor: no Python walk);
- the whole permission check of a bash call (``command_subject`` + ``Policy.evaluate``, with a deny
  rule and the ``plan`` preset) against starting the command it guards (``bash -c true``, the least
  a bash call costs).

``--populated`` creates, in the workspace, every file and directory the lines name (``tests/``,
``src*/``, ``build*/``...), so each argument is resolved through the file system instead of being
proved inside by its first name not existing (the cheap path of ``tools.paths``).

Run:  python3 bench/shell_rules.py [--lines 500] [--runs 5] [--populated]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from coder_es.permissions.policy import Policy
from coder_es.permissions.rules import parse_rule
from coder_es.permissions.shell_parse import _PARSER, parse_shell
from coder_es.tools.paths import command_subject

TEMPLATES = [
    "git status && git diff --stat HEAD~{i}",
    "python -m pytest -q tests/test_{i}.py 2>&1 | tail -20",
    "cd src{i} && grep -rn 'def main' . | head; echo $(date) > out{i}.txt",
    "for f in *.py; do ruff check $f{i}; done",
    "find . -name '*.pyc' -delete; ls -la build{i}",
    "sh -c 'make -j4 target{i}' && ./run.sh --n {i}",
]


def lines(n: int, run: int) -> list[str]:
    return [TEMPLATES[i % len(TEMPLATES)].format(i=f"{run}_{i}") for i in range(n)]


def median_per_item(fn: Callable[[list[str]], None], n: int, runs: int) -> float:
    times = []
    for run in range(runs):
        batch = lines(n, run)
        started = time.perf_counter()
        fn(batch)
        times.append((time.perf_counter() - started) / n)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=500)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--populated", action="store_true", help="create what the lines name")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp())
    if args.populated:
        (root / "tests").mkdir()
        for run in range(args.runs):
            for i in range(args.lines):
                for name in ("src", "build", "target", "out"):
                    (root / f"{name}{run}_{i}").mkdir()
    policy = Policy.for_agent("plan", [parse_rule("bash:rm*", "deny")])

    def raw(batch: list[str]) -> None:
        for line in batch:
            _PARSER.parse(line.encode())

    def parsed(batch: list[str]) -> None:
        parse_shell.cache_clear()
        for line in batch:
            parse_shell(line)

    def checked(batch: list[str]) -> None:
        parse_shell.cache_clear()
        for line in batch:
            policy.evaluate("bash", command_subject(line, root))

    def spawned(batch: list[str]) -> None:
        for _ in batch:
            subprocess.run(["bash", "-c", "true"], check=True)

    t_raw = median_per_item(raw, args.lines, args.runs)
    t_parse = median_per_item(parsed, args.lines, args.runs)
    t_check = median_per_item(checked, args.lines, args.runs)
    t_spawn = median_per_item(spawned, min(args.lines, 100), args.runs)
    print(f"tree-sitter parse       {t_raw * 1e6:8.0f} us/line")
    print(
        f"parse_shell             {t_parse * 1e6:8.0f} us/line  ({t_parse / t_raw:.1f}x the parse)"
    )
    print(f"permission check        {t_check * 1e6:8.0f} us/call")
    print(f"bash -c true            {t_spawn * 1e6:8.0f} us/call")
    print(f"check / spawn           {t_check / t_spawn:8.2f}")


if __name__ == "__main__":
    main()
