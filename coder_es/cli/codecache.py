"""The code that ``dataclasses`` generates, compiled once per user rather than once per run.

Python 3.11 builds each dataclass's ``__init__``, ``__repr__``, ``__eq__``, ``__hash__`` and
(frozen) ``__setattr__``/``__delattr__`` by ``exec`` of generated source text, so every run of
``coder-es`` parses and compiles several hundred small functions again: the Session aggregate's
event classes alone, made frozen dataclasses by eventsourcing, cost more than starting Python
itself, and in all it was about a third of a read command's instructions (issue 35; measured
with callgrind: ``_PyParser_ASTFromString`` + ``_PyAST_Compile`` under ``builtin_exec``).

The command line (``run``, never the library) points ``dataclasses``' own name ``exec`` at
``CodeCache.exec``: the same source text gives the same code object, which is looked up by
its text in a per-command file of marshalled code and compiled only when absent. Nothing else
changes: the code is executed with the same globals and locals as ``dataclasses`` passes.

The file lives in the user's cache directory (``$XDG_CACHE_HOME/coder-es/code``), is named by
the command and the interpreter's cache tag (marshal's format and the compiler's output belong
to one Python version), and is used only when it is the user's own and writable by no one
else: loading code from a file others can write would run their code. Any problem with it
(missing, damaged, not ours, not writable) means compiling as before; it is rewritten at exit
(a temporary file renamed over it) only when this run compiled something new.
"""

from __future__ import annotations

import atexit
import marshal
import os
import stat
import sys
from pathlib import Path
from types import CodeType
from typing import Any

from coder_es.cli.helpcache import read_private_file
from coder_es.userdirs import user_cache_dir

MAX_ENTRIES = 4096
"""A file holding more is rewritten with this run's entries only (old versions' code)."""


class CodeCache:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.codes: dict[str, CodeType] = _load(path)
        self.compiled = 0
        self.hits = 0

    def exec(self, source: Any, globals: Any = None, locals: Any = None) -> None:
        """``builtins.exec`` with the code of a source text looked up first."""
        if not isinstance(source, str):
            exec(source, globals, locals)
            return
        code = self.codes.get(source)
        if code is None:
            code = compile(source, "<string>", "exec")
            self.codes[source] = code
            self.compiled += 1
        else:
            self.hits += 1
        exec(code, globals, locals)

    def save(self) -> None:
        """Write the file if this run compiled something it did not hold."""
        if not self.compiled:
            return
        codes = self.codes
        if len(codes) > MAX_ENTRIES:
            codes = dict(list(codes.items())[-MAX_ENTRIES:])
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(marshal.dumps(codes))
            os.replace(tmp, self.path)
        except (OSError, ValueError):
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _load(path: Path) -> dict[str, CodeType]:
    data = read_private_file(path)
    if data is None:
        return {}
    try:
        loaded = marshal.loads(data)
    except (EOFError, ValueError, TypeError):
        return {}
    if not isinstance(loaded, dict):
        return {}
    return {k: v for k, v in loaded.items() if isinstance(k, str) and isinstance(v, CodeType)}


def cache_file(command: str, environ: Any = os.environ) -> Path:
    name = command if command.isidentifier() else "other"
    return user_cache_dir(environ) / "code" / f"{name}.{sys.implementation.cache_tag}.marshal"


def install(command: str) -> CodeCache | None:
    """Cache the code ``dataclasses`` generates for the rest of this process (the command
    line's ``run`` only). None when the directory has no place for it."""
    import dataclasses

    if sys.implementation.cache_tag is None or "exec" in vars(dataclasses):
        return None
    try:
        parent = cache_file(command).parent.parent
        if parent.exists():
            st = os.stat(parent)
            if st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                return None
    except OSError:
        return None
    cache = CodeCache(cache_file(command))
    dataclasses.exec = cache.exec  # type: ignore[attr-defined]
    atexit.register(cache.save)
    return cache
