"""Where a setting came from, what is wrong with it, and the error that carries every problem."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from coder_es.errors import UsageError

OriginKind = Literal["file", "env", "cli", "default"]

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def format_path(path: Sequence[str | int]) -> str:
    """A key path the way TOML writes it: ``permissions.rules.bash."git *"``, ``patterns[2]``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
            continue
        key = part if _BARE_KEY.match(part) else '"' + part.replace('"', '\\"') + '"'
        out = f"{out}.{key}" if out else key
    return out


@dataclass(frozen=True)
class Origin:
    """Where a value was set: a config file (with its line when found), an environment variable
    (``$NAME``) or a command-line flag (``--flag``)."""

    source: str
    kind: OriginKind = "file"
    line: int | None = None

    def __str__(self) -> str:
        return f"{self.source}:{self.line}" if self.line is not None else self.source


@dataclass(frozen=True)
class Problem:
    origin: Origin
    path: str
    """The dotted key path the problem is about ("" for the whole file)."""
    message: str

    def __str__(self) -> str:
        where = str(self.origin)
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class ConfigError(UsageError):
    """The configuration is invalid. ``problems`` lists every problem found, not just the first."""

    def __init__(self, problems: Iterable[Problem], summary: str = "invalid configuration") -> None:
        self.problems: tuple[Problem, ...] = tuple(problems)
        self.summary = summary
        count = len(self.problems)
        noun = "problem" if count == 1 else "problems"
        lines = "\n".join(f"  {p}" for p in self.problems)
        super().__init__(f"{summary} ({count} {noun}):\n{lines}")
