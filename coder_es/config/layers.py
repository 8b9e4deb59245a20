"""What one source of settings (a file, the environment, the command line) set, and where.

Apart from the schema (``coder_es.config.schema``) so that loading a configuration with no file,
no variable and no flag to check does not build the schema (start-up time).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from coder_es.config.locate import locate
from coder_es.config.problems import Origin, OriginKind, Problem, format_path

Key = tuple[str, ...]


@dataclass(frozen=True)
class Setting:
    value: Any
    origin: Origin
    additive: bool = False
    untrusted: bool = False
    """A permission rule kept from an untrusted project config: it may only tighten."""


@dataclass
class Layer:
    """One source of settings, checked: what it set and what was wrong with it."""

    source: str
    kind: OriginKind
    project: bool = False
    """A project config, which may not set every key."""
    lines: dict[Key, int] = field(default_factory=dict)
    values: dict[Key, Setting] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    failed: set[Key] = field(default_factory=set)
    """Key paths with a problem (``()``: the whole layer, e.g. a file that does not parse)."""
    sha256: str = ""
    """What workspace trust records: the hash of the file's bytes as read, and of the workspace
    files its hooks name (``config.hook_scripts``) for a project config."""
    scripts: dict[str, str] = field(default_factory=dict)
    """A project config: the workspace files its hooks name, with their digests."""

    def origin(self, path: tuple[str | int, ...]) -> Origin:
        line = locate(self.lines, path) if self.kind == "file" else None
        return Origin(self.source, self.kind, line)

    def problem(self, at: tuple[str | int, ...], message: str, shown: Sequence[str | int]) -> None:
        self.problems.append(Problem(self.origin(at), format_path(shown), message))
        self.failed.add(tuple(p for p in at if isinstance(p, str)))

    def fail(self, problem: Problem, at: Key) -> None:
        self.problems.append(problem)
        self.failed.add(at)

    def set(self, path: Key, value: Any, additive: bool = False) -> None:
        self.values[path] = Setting(value, self.origin(path), additive)
