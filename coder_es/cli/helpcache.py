"""``coder-es --help`` answered from the text argparse printed the last time, kept per user.

Building the parser (argparse, the table of ~30 commands, ``dataclasses``) and formatting its help
costs more than starting Python itself (issue 35), for a text that changes only with the code.
So the entry point (``coder_es.cli.main.run``) prints ``--help``, ``-h`` and a bare call's help
from a file when one matches, and otherwise lets the parser print it and keeps the text.

What the text depends on is the file's first line, compared whole: coder-es's version, the
interpreter's (argparse's wording and layout), the terminal width argparse wraps to (computed as
``shutil.get_terminal_size`` does), the locale variables gettext reads (argparse's headings are
translatable), and the size and modification time of the modules that declare the parser (an
edited checkout). Any difference, or a file that is not the user's own or that others can write,
means building the parser as before. The file lives in the user's cache directory
(``$XDG_CACHE_HOME/coder-es/help``), next to ``coder_es.cli.codecache``'s files.

This module imports only ``os``, ``stat``, ``sys`` and the version: it runs before anything
else of the command line.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Mapping, Sequence

from coder_es._version import __version__

HELP_ARGS: tuple[list[str], ...] = ([], ["-h"], ["--help"])
"""The command lines whose whole output is the top-level help."""

_LOCALE_VARIABLES = ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG")
_HERE = os.path.dirname(os.path.abspath(__file__))
# The modules whose text makes the help: the parser and the table of commands.
_SOURCES = ("dispatch.py", "commands.py")


def help_asked(argv: Sequence[str]) -> bool:
    return list(argv) in HELP_ARGS


def terminal_columns(environ: Mapping[str, str] = os.environ) -> int:
    """The width ``shutil.get_terminal_size`` gives argparse (without importing shutil)."""
    try:
        columns = int(environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
        columns = columns or 80
    return columns


def help_key(environ: Mapping[str, str] = os.environ) -> str:
    """One line naming everything the help text depends on."""
    parts = [__version__, sys.version.replace("\n", " "), str(terminal_columns(environ))]
    parts += [f"{name}={environ.get(name, '')}" for name in _LOCALE_VARIABLES]
    for name in _SOURCES:
        try:
            st = os.stat(os.path.join(_HERE, name))
            parts.append(f"{name}:{st.st_size}:{st.st_mtime_ns}")
        except OSError:
            parts.append(f"{name}:-")
    return "\t".join(parts)


def help_file(environ: Mapping[str, str] = os.environ) -> str:
    """``coder_es.userdirs.user_cache_dir`` / help / text (os.path: pathlib costs start-up)."""
    base = environ.get("XDG_CACHE_HOME", "")
    if not (base and os.path.isabs(base)):
        home = environ.get("HOME") or os.path.expanduser("~")
        base = os.path.join(home, ".cache")
    return os.path.join(base, "coder-es", "help", "top.txt")


def read_private_file(path: str | os.PathLike[str]) -> bytes | None:
    """The bytes of a per-user cache file, or None unless it is a regular file (not a link) of
    this user's that nobody else can write: a cache another user could plant is never used."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if (
            not stat.S_ISREG(st.st_mode)
            or st.st_uid != os.getuid()
            or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        ):
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    except OSError:
        return None
    finally:
        os.close(fd)


def cached_help(environ: Mapping[str, str] = os.environ) -> str | None:
    """The kept help text when it was made for this very key, else None."""
    data = read_private_file(help_file(environ))
    if data is None:
        return None
    try:
        key, _, text = data.decode("utf-8").partition("\n")
    except UnicodeDecodeError:
        return None
    return text if key == help_key(environ) and text else None


def keep_help(text: str, environ: Mapping[str, str] = os.environ) -> None:
    """Keep the text for the next call (a temporary file renamed over the old one); a cache
    that cannot be written is no error."""
    if not text.isascii():
        return  # the slow path prints it with the stream's own error handler
    path = help_file(environ)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(f"{help_key(environ)}\n{text}".encode())
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def print_cached_help() -> bool:
    """Print the kept help as argparse's ``print_help`` would; False when there is none."""
    text = cached_help()
    if text is None or sys.stdout is None:
        return False
    try:
        sys.stdout.write(text)
    except (AttributeError, OSError):  # as argparse's _print_message
        pass
    return True
