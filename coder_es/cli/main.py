"""The ``coder-es`` command line.

Each command lives in a module of this package that exposes ``register(subparsers)``; a command's
handler takes the parsed arguments and a ``Context`` and returns an exit code: 0 success, 1 the
command ran and found a problem (divergence, failed verification, conflict), 2 bad usage or
unreadable input.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from coder_es import __version__
from coder_es.cli.context import Context
from coder_es.errors import CoderESError, UsageError

# Modules that register subcommands, in the order they appear in --help.
COMMAND_MODULES = [
    "coder_es.cli.sessions",
    "coder_es.cli.run",
    "coder_es.cli.tree",
    "coder_es.cli.audit",
    "coder_es.cli.secrets",
    "coder_es.cli.replay_cmds",
    "coder_es.cli.clients",
    "coder_es.cli.fleet",
    "coder_es.cli.context_cmds",
    "coder_es.cli.trust_cmd",
]

EXIT_OK, EXIT_PROBLEM, EXIT_USAGE = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="coder-es",
        description="The event-sourced core of an AI coding agent.",
    )
    parser.add_argument("--version", action="version", version=f"coder-es {__version__}")
    parser.add_argument(
        "--workspace", default=".", help="the project directory (default: the current directory)"
    )
    parser.add_argument(
        "--store",
        default=None,
        help="store directory (default: $CODER_ES_STORE or WORKSPACE/.coder-es)",
    )
    parser.add_argument(
        "--backend",
        choices=["lmdb", "sqlite", "postgres", "popo"],
        default=None,
        help="event store backend (default: $CODER_ES_BACKEND or lmdb)",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    ctx: Context | None = None
    try:
        ctx = Context.from_args(args)
        return int(args.handler(args, ctx) or 0)
    except UsageError as e:
        print(f"coder-es: {e}", file=sys.stderr)
        return EXIT_USAGE
    except CoderESError as e:
        print(f"coder-es: {e}", file=sys.stderr)
        return EXIT_PROBLEM
    except KeyboardInterrupt:
        print("coder-es: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`coder-es show ... | head`): stop quietly, like other tools do,
        # and keep Python from complaining when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    finally:
        if ctx is not None:
            ctx.close()


def run() -> None:
    sys.exit(main())


if __name__ == "__main__":
    run()
