"""The ``coder-es`` command line: the parser and the dispatch to a command's handler
(``coder_es.cli.main`` is the entry point, which answers ``--help`` without this module).

The subcommands are rows of ``coder_es.cli.commands.COMMANDS``; a command's handler takes the
parsed arguments and a ``Context`` and returns an exit code: 0 success, 1 the command ran and found
a problem (divergence, failed verification, conflict), 2 bad usage or unreadable input. Only the
chosen command's module is imported, so ``coder-es --help`` starts in a few tens of milliseconds.

No input makes this print a traceback: errors of ours (``CoderESError``) become one line and exit
1 or 2; what the operating system refuses (``OSError``: a path too long, a directory that
vanished) and text that cannot be encoded become exit 2 with the reason.
"""

from __future__ import annotations

import argparse
import codecs
import io
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, cast

from coder_es._version import __version__
from coder_es.cli.commands import COMMANDS, Command, add_global_options, command_named
from coder_es.errors import CoderESError, UsageError

if TYPE_CHECKING:
    from coder_es.cli.context import Context

EXIT_OK, EXIT_PROBLEM, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    """argparse with help for typos: a near command or option is suggested ("did you mean"), a
    subcommand's mistake shows that subcommand's usage, not the top-level one."""

    def error(self, message: str) -> NoReturn:
        choice = _INVALID_CHOICE.match(message)
        if choice is not None:
            import difflib  # only on a mistake: start-up time

            word = choice.group(1)
            names = [n for n in _command_names() if not n.startswith("_")]
            near = difflib.get_close_matches(word, names, n=3, cutoff=0.6)
            hint = f" Did you mean {' or '.join(repr(n) for n in near)}?" if near else ""
            self.exit(
                EXIT_USAGE,
                f"{self.prog}: {word!r} is not a command.{hint} "
                f"('{self.prog} --help' lists them)\n",
            )
        super().error(message)

    def reject_unknown(self, extras: Sequence[str]) -> NoReturn:
        """``unrecognized arguments`` said by this (sub)command, with the near options."""
        import difflib  # only on a mistake: start-up time

        options = [o for action in self._actions for o in action.option_strings]
        hints = []
        for word in extras:
            if word.startswith("-"):
                near = difflib.get_close_matches(word.split("=", 1)[0], options, n=1, cutoff=0.6)
                if near:
                    hints.append(f"{word} -> did you mean {near[0]}?")
        message = f"unrecognized arguments: {' '.join(extras)}"
        if hints:
            message += f" ({'; '.join(hints)})"
        self.error(message)


# The optional dependencies (pyproject's extras) by the top-level module a command imports.
_EXTRA_OF = {
    "acp": "clients",
    "websockets": "clients",
    "mcp": "mcp",
    "psycopg": "postgres",
    "psycopg_pool": "postgres",
    "procrastinate": "postgres",
    "opentelemetry": "telemetry",
}

_INVALID_CHOICE = re.compile(r"argument COMMAND: invalid choice: '([^']*)'")


def _command_names() -> list[str]:
    return [name for command in COMMANDS for name in (command.name, *command.aliases)]


class _Pending:
    """A subcommand's parser not created yet: the keyword arguments to create it with."""

    def __init__(self, kwargs: dict[str, Any]) -> None:
        self.kwargs = kwargs


class _Parsers(dict[str, Any]):
    """The subcommands' parsers by name (argparse's ``choices``), each created when first looked
    up: creating ~40 parsers costs more start-up time than parsing the command line. Every name
    is a key from the start, so that membership, ``--help`` and "invalid choice" messages work
    as argparse has them."""

    def __init__(self, parser_class: type[argparse.ArgumentParser]) -> None:
        super().__init__()
        self.parser_class = parser_class

    def __getitem__(self, name: str) -> Any:
        value = super().__getitem__(name)
        if isinstance(value, _Pending):
            parser = self.parser_class(**value.kwargs)
            for alias, entry in self.items():
                if entry is value:
                    super().__setitem__(alias, parser)
            return parser
        return value


class _Subcommands(argparse._SubParsersAction):
    """Subcommands whose arguments are declared when the command is chosen: declaring every
    command's options costs more start-up time than parsing the few that were given."""

    undeclared: dict[str, Command]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._name_parser_map = self.choices = _Parsers(self._parser_class)

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        """``argparse``'s ``add_parser``, the parser itself created on first use (``_Parsers``)."""
        if kwargs.get("prog") is None:
            kwargs["prog"] = f"{self._prog_prefix} {name}"
        aliases = kwargs.pop("aliases", ())
        for each in (name, *aliases):
            if each in self._name_parser_map:
                raise argparse.ArgumentError(self, f"conflicting subparser: {each}")
        if "help" in kwargs:
            help = kwargs.pop("help")
            self._choices_actions.append(self._ChoicesPseudoAction(name, aliases, help))
        pending = _Pending(kwargs)
        for each in (name, *aliases):
            dict.__setitem__(self._name_parser_map, each, pending)
        return pending

    def declare(self, name: str) -> argparse.ArgumentParser:
        """The subcommand's parser, its arguments declared (once)."""
        sub: argparse.ArgumentParser = self._name_parser_map[name]
        command = self.undeclared.get(name)
        if command is not None:
            for alias in (command.name, *command.aliases):
                self.undeclared.pop(alias, None)
            command.arguments(sub)
            add_global_options(sub, after_command=True)
        return sub

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
        if values and values[0] in self._name_parser_map:
            self.declare(values[0])
        super().__call__(parser, namespace, values, option_string)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="coder-es",
        description="The event-sourced core of an AI coding agent.",
    )
    parser.register("action", "parsers", _Subcommands)
    parser.add_argument("--version", action="version", version=f"coder-es {__version__}")
    add_global_options(parser)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    assert isinstance(subparsers, _Subcommands)
    subparsers.required = True
    subparsers.undeclared = {}
    for command in COMMANDS:
        subparsers.add_parser(
            command.name,
            aliases=list(command.aliases),
            help=command.help,
            description=command.description,
            epilog=command.epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter
            if command.epilog
            else argparse.HelpFormatter,
        )
        for name in (command.name, *command.aliases):
            subparsers.undeclared[name] = command
    return parser


def declared_parser(name: str) -> argparse.ArgumentParser:
    """The parser of one subcommand with its arguments declared (for tests and docs)."""
    subparsers = next(a for a in build_parser()._actions if isinstance(a, _Subcommands))
    return subparsers.declare(name)


def _subcommand_parser(parser: argparse.ArgumentParser, name: str) -> Any:
    subparsers = next(a for a in parser._actions if isinstance(a, _Subcommands))
    return subparsers.choices.get(name)


def _fail(message: str, code: int) -> int:
    # Text from the user (a path, an argument) may hold bytes that are not UTF-8: escape them
    # rather than fail to print the message that reports them.
    sys.stderr.write(f"coder-es: {message}\n".encode("utf-8", "backslashreplace").decode("utf-8"))
    return code


SHOWN_ERRORS = "coder_es.shown"


def _show_undecodable(error: UnicodeError) -> tuple[str, int]:
    """Codec error handler: a file name's non-UTF-8 bytes (surrogate escapes) printed as
    ``\\xE9`` escapes, never as raw bytes or a crash."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    from coder_es.domain.chain import shown  # only when such a name is printed: start-up time

    return shown(error.object[error.start : error.end]), error.end


codecs.register_error(SHOWN_ERRORS, _show_undecodable)


def main(argv: Sequence[str] | None = None, *, started: Callable[[], object] | None = None) -> int:
    """``started``: called once the command's handler, its modules and its configuration are
    ready, just before the handler runs (``coder_es.cli.main.run``)."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors=SHOWN_ERRORS)
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        # A bare call is a question: answer it with the help, not with an error.
        parser.print_help()
        return EXIT_OK
    args, extras = parser.parse_known_args(argv)
    if extras:
        sub = _subcommand_parser(parser, args.command)
        target = sub if isinstance(sub, _Parser) else parser
        cast(_Parser, target).reject_unknown(extras)
    command = command_named(args.command)
    ctx: Context | None = None
    try:
        from coder_es.cli.context import Context

        handler = command.handler()
        ctx = Context.from_args(
            args,
            needs_store=command.needs_store,
            tolerate_config_errors=command.reports_bad_config or command.reads_only,
        )
        if started is not None:
            started()
        if ctx.config_error is not None and not command.reports_bad_config:
            problems = ctx.config_error.problems
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            print(
                f"coder-es: warning: the configuration has problems; {args.command} runs with "
                f"the defaults. {problems[0]}{more}; `coder-es doctor` lists them",
                file=sys.stderr,
            )
        return int(handler(args, ctx) or 0)
    except UsageError as e:
        return _fail(str(e), EXIT_USAGE)
    except ModuleNotFoundError as e:
        extra = _EXTRA_OF.get((e.name or "").partition(".")[0])
        if extra is None:
            raise
        return _fail(
            f"{args.command} needs the '{extra}' extra, which is not installed: "
            f"pip install 'coder-es[{extra}]' (or 'coder-es[all]')",
            EXIT_USAGE,
        )
    except CoderESError as e:
        return _fail(str(e), EXIT_PROBLEM)
    except KeyboardInterrupt:
        print("coder-es: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`coder-es show ... | head`): stop quietly, like other tools do,
        # and keep Python from complaining when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except OSError as e:
        # What the system refused for a path the user gave (too long, not a directory, gone).
        where = f": {os.fsdecode(e.filename)}" if e.filename else ""
        return _fail(f"{e.strerror or e}{where}", EXIT_USAGE)
    except UnicodeError as e:
        return _fail(f"text that cannot be encoded in the input: {e}", EXIT_USAGE)
    finally:
        if ctx is not None:
            ctx.close()
