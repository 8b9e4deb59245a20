"""The values the dependency graph is made of. All frozen; all orders are sorted."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Import:
    """One import as written in a file, before resolution.

    ``module`` is the text naming what is imported: ``a.b`` (Python), ``./x`` (JS/TS),
    ``example.com/m/pkg`` (Go), ``crate::a::B`` or a ``mod`` name (Rust). ``names`` are the names a
    Python ``from`` import takes (``*`` for a wildcard); ``level`` counts a Python relative
    import's leading dots.
    """

    line: int
    kind: str  # import | from | require | dynamic | export | mod | use
    module: str
    names: tuple[str, ...] = ()
    level: int = 0


@dataclass(frozen=True)
class FileImports:
    """What the import pass extracts from one file's content."""

    language: str
    imports: tuple[Import, ...]
    package: str = ""  # Go: the package clause; files of one Go package see each other


@dataclass(frozen=True, order=True)
class Definition:
    line: int
    name: str
    kind: str  # class | function | method | constant | interface | module | macro | type
    text: str  # the source line the definition starts on, for the repo map


@dataclass(frozen=True, order=True)
class Reference:
    name: str
    kind: str  # call | class | type | implementation
    line: int  # first occurrence


@dataclass(frozen=True)
class FileTags:
    """Definitions and references from the grammar's tags query."""

    definitions: tuple[Definition, ...]
    references: tuple[Reference, ...]

    def defined_names(self) -> frozenset[str]:
        return frozenset(d.name for d in self.definitions)

    def referenced_names(self) -> frozenset[str]:
        return frozenset(r.name for r in self.references)


@dataclass(frozen=True, order=True)
class Edge:
    source: str
    target: str


@dataclass(frozen=True, order=True)
class Reached:
    """A file reached by a dependency walk, at its shortest distance."""

    depth: int
    path: str


@dataclass(frozen=True)
class UpdateResult:
    """What one ``DepGraph.update`` touched (lets callers and tests see the work was small)."""

    added: tuple[str, ...]
    removed: tuple[str, ...]
    modified: tuple[str, ...]
    reparsed: tuple[str, ...]
    reresolved: tuple[str, ...]


@dataclass(frozen=True)
class RankedFile:
    path: str
    score: float
    definitions: tuple[Definition, ...]  # the ones rendered in the map, in source order


@dataclass(frozen=True)
class RepoMap:
    """Related files ranked for a task, packed into a token budget."""

    files: tuple[RankedFile, ...]
    text: str
    tokens: int
